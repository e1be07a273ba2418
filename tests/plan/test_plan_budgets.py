"""`upgrader plan` shows the budgets as `run` resolves them on the fleet: a percentage maxUnavailable
as the number of nodes it allows, of every node with a driver (skipped ones included), in the table
and in JSON/YAML; and its waves count a skipped node's cordon against the budget, as `run` does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from upgrader.commands.cli import main
from upgrader.core.model.states import SKIP_LABEL
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

from .test_plan import export


def plan(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    policy: dict[str, Any],
    output: str = "table",
    nodes: int = 6,
    skip: str | None = None,
) -> str:
    """`upgrader plan --dry-run --from-file` of the healthy scenario: its stdout. `skip` is a node
    labelled skip and cordoned (taken out of the rollout for repairs)."""
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy", nodes)
    if skip is not None:
        patch = {"metadata": {"labels": {SKIP_LABEL: "true"}}, "spec": {"unschedulable": True}}
        cluster.store.patch(cluster.type("nodes"), None, skip, "application/merge-patch+json", patch)
    listing, policy_file = tmp_path / "fleet.json", tmp_path / "policy.yaml"
    listing.write_text(json.dumps(export(cluster)))
    policy_file.write_text(yaml.safe_dump(policy))
    capsys.readouterr()
    args = ["plan", "--dry-run", "--from-file", str(listing), "--policy", str(policy_file)]
    main([*args, "-o", output] if output != "table" else args)
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("policy", "nodes", "line"),
    [
        (
            {"maxParallelUpgrades": 2, "maxUnavailable": "10%"},
            40,
            "BUDGETS: maxParallelUpgrades 2, maxUnavailable 10% of 40 nodes = 4, soak 0s between domains",
        ),
        (
            {},  # the defaults
            6,
            "BUDGETS: maxParallelUpgrades 1, maxUnavailable 25% of 6 nodes = 2, soak 0s between domains",
        ),
        (
            {"maxParallelUpgrades": 0, "maxUnavailable": 3, "failureDomains": {"soakSeconds": 600}},
            6,
            "BUDGETS: maxParallelUpgrades 0 (no limit), maxUnavailable 3, soak 600s between domains",
        ),
        (
            {"maxUnavailable": 0},
            6,
            "BUDGETS: maxParallelUpgrades 1, maxUnavailable 0 (only nodes already unavailable start), "
            "soak 0s between domains",
        ),
        (
            {"maxUnavailable": "0%"},
            6,
            "BUDGETS: maxParallelUpgrades 1, maxUnavailable 0% of 6 nodes = 0 (only nodes already unavailable "
            "start), soak 0s between domains",
        ),
    ],
)
def test_the_table_shows_the_budgets_resolved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: dict[str, Any], nodes: int, line: str
) -> None:
    out = plan(tmp_path, capsys, policy, nodes=nodes).splitlines()
    assert out[1] == line
    assert out[0].startswith(f"PLAN (dry run): {nodes} of {nodes} nodes to upgrade in ")


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_carry_the_resolved_budgets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    text = plan(tmp_path, capsys, {"maxParallelUpgrades": 2, "maxUnavailable": "10%"}, output, nodes=40)
    summary = (json.loads(text) if output == "json" else yaml.safe_load(text))["summary"]
    assert {k: summary[k] for k in ("max_parallel_upgrades", "max_unavailable", "max_unavailable_nodes",
                                    "driver_nodes", "budgets")} == {
        "max_parallel_upgrades": 2,
        "max_unavailable": "10%",
        "max_unavailable_nodes": 4,
        "driver_nodes": 40,
        "budgets": "maxParallelUpgrades 2, maxUnavailable 10% of 40 nodes = 4, soak 0s between domains",
    }


def test_a_skipped_cordoned_node_counts_in_the_base_and_holds_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As in `run`: gpu-c-02 is skipped and cordoned, so maxUnavailable 1 is spent and no node ever
    starts (run says `maxUnavailable 1 reached: gpu-c-02 (skipped, cordoned, not by upgrader); ...`)."""
    result = json.loads(plan(tmp_path, capsys, {"maxUnavailable": "10%"}, "json", skip="gpu-c-02"))
    assert result["summary"]["budgets"] == (
        "maxParallelUpgrades 1, maxUnavailable 10% of 6 nodes = 1, soak 0s between domains"
    )
    assert result["waves"] == []
    not_scheduled = sorted(f["node"] for f in result["findings"] if f["kind"] == "not-scheduled")
    assert not_scheduled == ["gpu-a-01", "gpu-a-02", "gpu-b-01", "gpu-b-02", "gpu-c-01"]
