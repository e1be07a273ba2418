"""`upgrader plan` with policy pools: each pool's waves replayed under its own budgets, canary and
failure domains, side by side, named by pool in the table and in JSON (docs/policy.md#pools)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .test_plan_budgets import plan
from .test_refuse_input import export, refused

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
POLICY = {
    "maxParallelUpgrades": 1, "maxUnavailable": "100%",
    "pools": [
        {"name": "training", "nodeSelector": f"nvidia.com/gpu.product={H100}", "maxParallelUpgrades": 5,
         "failureDomains": {"canary": "us-east-1a", "canaryNodes": 1}},
        {"name": "inference", "nodeSelector": f"nvidia.com/gpu.product={A100}", "maxParallelUpgrades": 2,
         "failureDomains": {"canary": "us-east-1c"}},
    ],
}


def test_each_pool_has_waves_of_its_own_under_its_own_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = json.loads(plan(tmp_path, capsys, POLICY, output="json", nodes=30))
    waves = report["waves"]
    training = [(w["wave"], w["domain"], len(w["nodes"]), w.get("canary_nodes", False))
                for w in waves if w["pool"] == "training"]
    inference = [(w["wave"], w["domain"], len(w["nodes"])) for w in waves if w["pool"] == "inference"]
    # 30 nodes, 10 a zone: H100 (training) 6 in us-east-1a, 4 in 1b, 6 in 1c; A100 (inference) 4, 6, 4.
    assert training == [(1, "us-east-1a", 1, True), (2, "us-east-1a", 5, False), (3, "us-east-1b", 4, False),
                        (4, "us-east-1c", 5, False), (5, "us-east-1c", 1, False)]
    assert inference == [(1, "us-east-1c", 2), (2, "us-east-1c", 2), (3, "us-east-1a", 2), (4, "us-east-1a", 2),
                         (5, "us-east-1b", 2), (6, "us-east-1b", 2), (7, "us-east-1b", 2)]
    assert {n["pool"] for n in report["nodes"]} == {"training", "inference"}
    table = plan(tmp_path, capsys, POLICY, nodes=30)
    assert "WAVE 1 (pool training, us-east-1a, canary nodes)" in table
    assert "WAVE 1 (pool inference, us-east-1c)" in table


def test_nodes_no_pool_selects_are_the_pool_default_under_the_policys_own_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = {**POLICY, "pools": POLICY["pools"][:1]}
    waves = json.loads(plan(tmp_path, capsys, policy, output="json", nodes=30))["waves"]
    rest = [(w["domain"], len(w["nodes"])) for w in waves if w["pool"] == "default"]
    assert len(rest) == 14 and all(n == 1 for _, n in rest)  # maxParallelUpgrades 1, the policy's own
    assert [d for d, _ in rest[:1]] == ["us-east-1a"]  # the policy's own failure domains: sorted, none named


def test_a_pool_that_selects_no_node_is_a_warning_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = {**POLICY, "pools": [{"name": "typo", "nodeSelector": "nvidia.com/gpu.product=H10O"}]}
    findings = json.loads(plan(tmp_path, capsys, policy, output="json", nodes=6))["findings"]
    assert [f for f in findings if f["kind"] == "empty-pool"] == [{
        "kind": "empty-pool", "severity": "warning", "node": None,
        "message": "pool typo (nodeSelector nvidia.com/gpu.product=H10O) selects no managed GPU node; nodes no "
                   "pool selects are in pool default, under the policy's own budgets"}]


def test_a_pools_canary_no_node_of_it_is_in_is_refused_naming_the_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # us-east-1b holds only A100 nodes in the 6-node fleet: no node of the training pool is there.
    policy = {"pools": [{**POLICY["pools"][0], "failureDomains": {"canary": "us-east-1b"}}]}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    fleet = export(tmp_path)
    assert refused(["plan", "--dry-run", "--from-file", fleet, "--policy", str(path)], capsys) == (
        f'policy {path}: pools.0.failureDomains.canary: "us-east-1b" is not the zone of any managed GPU node '
        "(zones: us-east-1a, us-east-1c)"
    )
