"""The upgrade policy's defaults and accepted forms: GPU Operator defaults and keys (a pasted Operator block,
every key of DriverUpgradePolicySpec), the upgrader's own keys, and maxUnavailable scaling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from upgrader.controller.settings import load_policy
from upgrader.core.policy.policy import OnBlockedTimeout, OnNodeFailure, Policy, policy_from_mapping

from .policy_fixtures import write

# ----- defaults and accepted forms -----------------------------------------------------------------


def test_defaults_match_the_gpu_operator() -> None:
    p = Policy()
    assert p.model_dump(
        by_alias=True,
        include={
            "auto_upgrade",
            "max_parallel_upgrades",
            "max_unavailable",
            "wait_for_completion",
            "gpu_pod_deletion",
            "drain",
        },
    ) == {
        "autoUpgrade": True,
        "maxParallelUpgrades": 1,
        "maxUnavailable": "25%",
        "waitForCompletion": {"podSelector": "", "timeoutSeconds": 0},
        "gpuPodDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
        "drain": {
            "enable": False,
            "force": False,
            "podSelector": "",
            "timeoutSeconds": 300,
            "deleteEmptyDir": False,
        },
    }


def test_upgrader_additions_have_safe_defaults() -> None:
    p = Policy()
    assert p.on_blocked_timeout is OnBlockedTimeout.HALT
    assert p.on_node_failure is OnNodeFailure.HALT
    assert (p.validation.pod_selector, p.validation.timeout_seconds) == ("app=nvidia-operator-validator", 600)
    assert p.pod_restart.timeout_seconds == 600
    assert (
        p.failure_domains.label_key,
        p.failure_domains.order,
        p.failure_domains.canary,
        p.failure_domains.soak_seconds,
    ) == ("topology.kubernetes.io/zone", (), None, 0)


@pytest.mark.parametrize(
    "text", ["", "# nothing but a comment\n", "{}\n", "upgradePolicy:\n", "driver:\n  upgradePolicy:\n"]
)
def test_an_empty_policy_file_is_the_defaults(tmp_path: Path, text: str) -> None:
    assert load_policy(write(tmp_path, text)) == Policy()


def test_no_file_is_the_defaults() -> None:
    assert load_policy(None) == Policy()


OPERATOR_BLOCK = """\
autoUpgrade: true
maxParallelUpgrades: 3
maxUnavailable: 50%
waitForCompletion:
  timeoutSeconds: 900
  podSelector: app=training
podDeletion:
  force: true
  timeoutSeconds: 120
  deleteEmptyDir: true
drain:
  enable: true
  force: false
  podSelector: gpu-workload=true
  timeoutSeconds: 600
  deleteEmptyDir: false
"""


def _indent(text: str, by: int) -> str:
    return "".join(" " * by + line + "\n" for line in text.splitlines())


@pytest.mark.parametrize(
    "text",
    [
        OPERATOR_BLOCK,
        "upgradePolicy:\n" + _indent(OPERATOR_BLOCK, 2),
        "driver:\n  upgradePolicy:\n" + _indent(OPERATOR_BLOCK, 4),
    ],
    ids=["bare", "upgradePolicy", "driver.upgradePolicy"],
)
def test_a_pasted_operator_block_loads(tmp_path: Path, text: str) -> None:
    p = load_policy(write(tmp_path, text))
    assert p.max_parallel_upgrades == 3
    assert p.max_unavailable == "50%"
    assert (p.wait_for_completion.timeout_seconds, p.wait_for_completion.pod_selector) == (
        900,
        "app=training",
    )
    assert (
        p.gpu_pod_deletion.force,
        p.gpu_pod_deletion.timeout_seconds,
        p.gpu_pod_deletion.delete_empty_dir,
    ) == (True, 120, True)
    assert (p.drain.enable, p.drain.pod_selector, p.drain.timeout_seconds) == (True, "gpu-workload=true", 600)


@pytest.mark.parametrize("key", ["podDeletion", "gpuPodDeletion"])
def test_pod_deletion_is_an_alias_of_gpu_pod_deletion(key: str) -> None:
    p = policy_from_mapping({key: {"force": True, "timeoutSeconds": 60, "deleteEmptyDir": True}})
    assert (
        p.gpu_pod_deletion.force,
        p.gpu_pod_deletion.timeout_seconds,
        p.gpu_pod_deletion.delete_empty_dir,
    ) == (True, 60, True)
    assert p.model_dump(by_alias=True)["gpuPodDeletion"]["timeoutSeconds"] == 60


def test_upgrader_keys_load(tmp_path: Path) -> None:
    p = load_policy(
        write(
            tmp_path,
            """\
failureDomains:
  labelKey: example.com/rack
  order: [r2, r1]
  canary: r3
  soakSeconds: 1800
validation: {podSelector: "app=validator", timeoutSeconds: 120}
podRestart: {timeoutSeconds: 300}
onBlockedTimeout: fail
onNodeFailure: continue
""",
        )
    )
    assert p.failure_domains.order == ("r2", "r1")
    assert (p.failure_domains.label_key, p.failure_domains.canary, p.failure_domains.soak_seconds) == (
        "example.com/rack",
        "r3",
        1800,
    )
    assert p.on_blocked_timeout is OnBlockedTimeout.FAIL
    assert p.on_node_failure is OnNodeFailure.CONTINUE
    assert (p.validation.timeout_seconds, p.pod_restart.timeout_seconds) == (120, 300)


@pytest.mark.parametrize(
    ("value", "total", "nodes"),
    [
        ("25%", 6, 2),  # 1.5 rounds up
        ("25%", 4, 1),
        ("25%", 5, 2),
        ("25%", 1, 1),
        ("25%", 0, 0),  # as the Operator: ceil(0); with no node there is nothing to start
        ("0%", 10, 0),  # the Operator's 0: only nodes already unavailable progress
        (0, 10, 0),
        ("1%", 1000, 10),
        ("1%", 3, 1),
        ("33%", 10, 4),  # 3.3 rounds up
        ("50%", 7, 4),
        ("100%", 7, 7),
        (" 10% ", 10, 1),
        (2, 10, 2),
        ("3", 10, 3),  # a number as a string is a number
        (20, 10, 20),  # a count is not capped by the fleet
    ],
)
def test_max_unavailable_scaling(value: Any, total: int, nodes: int) -> None:
    assert policy_from_mapping({"maxUnavailable": value}).max_unavailable_nodes(total) == nodes


@given(st.integers(0, 100), st.integers(0, 5000))
def test_percent_scaling_rounds_up_like_the_operator(pct: int, total: int) -> None:
    n = policy_from_mapping({"maxUnavailable": f"{pct}%"}).max_unavailable_nodes(total)
    assert n * 100 >= pct * total  # never below the share asked for
    assert n == 0 or (n - 1) * 100 < pct * total  # and not a whole node above it
    assert n >= 1 or pct == 0 or total == 0  # any share of a fleet is at least one node


# ----- the GPU Operator's DriverUpgradePolicySpec, every key ----------------------------------------

OPERATOR_SPEC = """
driver:
  upgradePolicy:
    autoUpgrade: true
    maxParallelUpgrades: 3
    maxUnavailable: 40%
    waitForCompletion:
      podSelector: app=batch
      timeoutSeconds: 120
    podDeletion:
      force: true
      timeoutSeconds: 90
      deleteEmptyDir: true
    drain:
      enable: true
      force: true
      podSelector: tier=web
      timeoutSeconds: 200
      deleteEmptyDir: true
"""


def test_every_key_of_the_operators_policy_spec_is_honoured() -> None:
    """api/upgrade/v1alpha1 DriverUpgradePolicySpec (k8s-operator-libs), as a ClusterPolicy holds it."""
    pol = policy_from_mapping(yaml.safe_load(OPERATOR_SPEC))
    assert (pol.auto_upgrade, pol.max_parallel_upgrades, pol.max_unavailable_nodes(10)) == (True, 3, 4)
    assert (pol.wait_for_completion.pod_selector, pol.wait_for_completion.timeout_seconds) == ("app=batch", 120)
    deletion = pol.gpu_pod_deletion
    assert (deletion.force, deletion.timeout_seconds, deletion.delete_empty_dir) == (True, 90, True)
    drain = pol.drain
    assert (drain.enable, drain.force, drain.pod_selector, drain.timeout_seconds, drain.delete_empty_dir) == (
        True,
        True,
        "tier=web",
        200,
        True,
    )
    assert pol.drain_every_node is False  # the Operator drains only when deletion cannot finish


@pytest.mark.parametrize("section", ["waitForCompletion", "podDeletion", "gpuPodDeletion", "drain"])
def test_an_empty_section_is_the_operators_nil_spec(section: str) -> None:
    assert policy_from_mapping(yaml.safe_load(f"upgradePolicy:\n  {section}:\n")) == Policy()
