"""Every example policy loads, and means what its comments say."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from upgrader.controller.settings import load_policy
from upgrader.core.compat.profiles import load_profiles_text, qualification
from upgrader.core.policy.policy import OnBlockedTimeout, OnInsufficientCapacity, OnNodeFailure, Policy

POLICY_DIR = Path(__file__).resolve().parent.parent / "policies"
# profiles*.yaml are compatibility profiles, not upgrade policies: test_profiles_example loads them.
POLICIES = sorted(p for p in POLICY_DIR.glob("*.yaml") if not p.name.startswith("profiles"))


def test_there_are_examples() -> None:
    assert {p.name for p in POLICIES} >= {"default.yaml", "canary-by-zone.yaml", "drain-enabled.yaml"}


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_example_loads(path: Path) -> None:
    assert isinstance(load_policy(str(path)), Policy)


def test_default_file_is_the_default_policy() -> None:
    assert load_policy(str(POLICIES[0].parent / "default.yaml")) == Policy()


def test_pasted_operator_block_takes_operator_values() -> None:
    policy = load_policy(str(POLICIES[0].parent / "gpu-operator-paste.yaml"))
    assert policy.gpu_pod_deletion.timeout_seconds == 300
    assert policy.max_unavailable == "25%"
    assert not policy.drain.enable


def test_canary_and_fail_fast_examples() -> None:
    canary = load_policy(str(POLICIES[0].parent / "canary-by-zone.yaml"))
    assert canary.failure_domains.canary == "us-east-1a" and canary.failure_domains.soak_seconds == 1800
    fast = load_policy(str(POLICIES[0].parent / "fail-fast.yaml"))
    assert fast.on_blocked_timeout is OnBlockedTimeout.FAIL and fast.on_node_failure is OnNodeFailure.CONTINUE
    drain = load_policy(str(POLICIES[0].parent / "drain-enabled.yaml"))
    assert drain.drain.enable and drain.drain.pod_selector == "gpu-upgrader.io/drain-with-driver=true"


def test_paced_example() -> None:
    paced = load_policy(str(POLICY_DIR / "paced.yaml"))
    assert [w.name for w in paced.maintenance_windows] == ["weeknights", "weekend"]
    assert paced.alert_gate is not None and paced.alert_gate.alerts == ("GPUServingSLOBurnRateHigh", "KubeNodeNotReady")
    assert paced.gpu_capacity.on_insufficient is OnInsufficientCapacity.WAIT


def test_profiles_example() -> None:
    """The example profiles load, match the emulator's fleet, and one of them has expired."""
    path = POLICY_DIR / "profiles.example.yaml"
    profiles = load_profiles_text(path.read_text(encoding="utf-8"), str(path))
    assert len(profiles) == 3
    assert {p.driver for p in profiles} == {"550.90.07"} and {p.os for p in profiles} == {"ubuntu22.04"}
    today = date(2026, 11, 29)
    assert [p.name for p in profiles if today >= p.expires] == ["h100-550-k105"]
    p5 = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    h100, kernel = "NVIDIA-H100-80GB-HBM3", "5.15.0-113-generic"
    assert qualification(profiles, p5, h100, "550.90.07", kernel, "ubuntu22.04", today)[0] is profiles[0]
    p4d = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    a100 = "NVIDIA-A100-SXM4-80GB"
    assert qualification(profiles, p4d, a100, "550.90.07", kernel, "ubuntu22.04", today)[0] is profiles[1]
    assert qualification(profiles, p4d, h100, "550.90.07", kernel, "ubuntu22.04", today)[0] is None
    covering, reason = qualification(
        profiles, p5, h100, "550.90.07", "5.15.0-105-generic", "ubuntu22.04", today
    )
    assert covering is None
    assert reason == "only an expired profile covers this node: h100-550-k105 v1 expired 2026-01-31"
