"""Every example policy loads, and means what its comments say."""

from __future__ import annotations

from pathlib import Path

import pytest

from upgrader.config import load_policy
from upgrader.core.policy import OnBlockedTimeout, OnNodeFailure, Policy

POLICIES = sorted((Path(__file__).resolve().parent.parent / "policies").glob("*.yaml"))


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
