"""Only one thing drives a driver upgrade (core/fleet/interlocks.py): upgrader refuses to run while the GPU
Operator's own upgrade controller is on for a driver DaemonSet it manages, or a driver DaemonSet is not
OnDelete, and halts a rollout under way, writing nothing on the nodes, when either is turned on.
Real kubectl flips them, as an admin would; the controller talks through the official client (mid-rollout: over
HTTP, its passes a virtual second apart on the emulator's virtual clock)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from upgrader.commands.cli import main
from upgrader.controller.rollout_metrics import families
from upgrader.core.fleet.interlocks import OperatorUpgrade, judge, operator_upgrade
from upgrader.core.model.views import DriverSet
from upgrader.sim.fleets.builders import CLUSTER_POLICY

from .conftest import Rollout

AUTO_ON = '{"spec":{"driver":{"upgradePolicy":{"autoUpgrade":true}}}}'
AUTO_OFF = '{"spec":{"driver":{"upgradePolicy":{"autoUpgrade":false}}}}'


def _ds(name: str, owner: tuple[str, str] | None = ("ClusterPolicy", "cluster-policy"), strategy: str = "OnDelete"
        ) -> DriverSet:
    return DriverSet("gpu-operator", name, {}, "h", 1, "550.90.07", None, update_strategy=strategy, owner=owner)


def test_judge_names_the_object_and_the_command_that_turns_it_off() -> None:
    cp = operator_upgrade("ClusterPolicy", {"metadata": {"name": "cluster-policy"},
                                            "spec": {"driver": {"upgradePolicy": {"autoUpgrade": True}}}})
    assert [i.text for i in judge([cp], [_ds("nvidia-driver-daemonset")])] == [
        "ClusterPolicy cluster-policy spec.driver.upgradePolicy.autoUpgrade is true: the GPU Operator's own upgrade "
        "controller drives driver DaemonSet gpu-operator/nvidia-driver-daemonset too; turn it off: kubectl patch "
        "clusterpolicies.nvidia.com cluster-policy --type merge -p "
        "'{\"spec\":{\"driver\":{\"upgradePolicy\":{\"autoUpgrade\":false}}}}'; "
        "see runbooks/install-beside-gpu-operator.md",
    ]


@pytest.mark.parametrize(
    ("upgrades", "sets", "count"),
    [
        # An NVIDIADriver governs only the DaemonSets it owns; the ClusterPolicy then governs none of them.
        ([OperatorUpgrade("ClusterPolicy", "cluster-policy", True)], [_ds("a", ("NVIDIADriver", "r550"))], 0),
        ([OperatorUpgrade("NVIDIADriver", "r550", True)], [_ds("a", ("NVIDIADriver", "r550"))], 1),
        ([OperatorUpgrade("NVIDIADriver", "r535", True)], [_ds("a", ("NVIDIADriver", "r550"))], 0),
        # A DaemonSet neither owns: any ClusterPolicy may govern it.
        ([OperatorUpgrade("ClusterPolicy", "cp", True)], [_ds("a", None)], 1),
        ([OperatorUpgrade("ClusterPolicy", "cp", None)], [_ds("a", None)], 1),  # not a boolean: cannot judge
        ([OperatorUpgrade("ClusterPolicy", "cluster-policy", False)], [_ds("a", strategy="RollingUpdate")], 1),
        ([], [_ds("a")], 0),
    ],
)
def test_which_objects_govern_which_daemonsets(upgrades: list[OperatorUpgrade], sets: list[DriverSet],
                                               count: int) -> None:
    assert len(judge(upgrades, sets)) == count


def test_run_refuses_to_start_while_the_operators_upgrade_controller_is_on(
    rollout: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    r: Rollout = rollout("healthy")
    r.kubectl("patch", "clusterpolicies.nvidia.com", CLUSTER_POLICY, "--type", "merge", "-p", AUTO_ON)
    writes = len([q for q in r.cluster.requests if q.method != "GET"])
    capsys.readouterr()
    assert main(["run", "--once", "--kubeconfig", str(r.kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "upgrader: error: refusing to run: ClusterPolicy cluster-policy spec.driver.upgradePolicy.autoUpgrade is true"
    )
    assert err.count("\n") == 1 and "kubectl patch clusterpolicies.nvidia.com cluster-policy" in err
    assert len([q for q in r.cluster.requests if q.method != "GET"]) == writes, "nothing written"


def _rolling(r: Rollout) -> Any:
    """A controller whose passes (a virtual second apart, for at most 60 virtual seconds) started a node."""
    ctl = r.controller()
    deadline = r.now() + 60
    while r.now() < deadline:
        if r.recorder.starts():
            return ctl
        r.step_pass(ctl)
    raise AssertionError("nothing started")


@pytest.mark.parametrize(
    ("flip", "words"),
    [
        (("patch", "clusterpolicies.nvidia.com", CLUSTER_POLICY, "--type", "merge", "-p", AUTO_ON),
         "ClusterPolicy cluster-policy spec.driver.upgradePolicy.autoUpgrade is true"),
        (("-n", "gpu-operator", "patch", "daemonset", "{ds}", "--type", "merge", "-p",
          '{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"100%"}}}}'),
         "has updateStrategy RollingUpdate: Kubernetes itself replaces its driver pods, under running jobs"),
    ],
    ids=["auto-upgrade", "rolling-update"],
)
def test_turned_on_mid_rollout_it_halts_and_writes_nothing_on_the_nodes(
    rollout: Any, flip: tuple[str, ...], words: str
) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    ctl = _rolling(r)
    r.kubectl(*(r.info.driver_daemonsets[0] if a == "{ds}" else a for a in flip))
    report = r.step_pass(ctl)
    before = len(r.cluster.requests)
    for _ in range(20):  # 20 virtual seconds halted
        report = r.step_pass(ctl)
    status = report.status
    assert status is not None and status.phase == "Halted" and words in str(status.halt_reason)
    assert status.interlocks and words in status.interlocks[0]
    node_writes = [q for q in r.cluster.requests[before:] if q.resource in ("nodes", "pods") and q.method != "GET"]
    assert node_writes == [], "no node or pod is written while another writer drives the drivers"
    gauges = {(m.name, tuple(s.labels.values())): s.value for m in families(status, 0.0) for s in m.samples}
    assert gauges[("upgrader_interlocks", ())] == 1 and gauges[("upgrader_rollout_halted", ())] == 1
    warnings = [e["message"] for n in r.info.nodes for e in r.events_for(n) if e["type"] == "Warning"]
    assert any(m.startswith("rollout halted: ") and words in m for m in warnings)
    if flip[0] == "patch":  # turned off again, the rollout goes on
        r.kubectl("patch", "clusterpolicies.nvidia.com", CLUSTER_POLICY, "--type", "merge", "-p", AUTO_OFF)
        assert r.run_until(("Done",), timeout=120, controller=ctl)["interlocks"] == []


def test_plan_reports_the_interlocks_as_blocking(rollout: Any, capsys: pytest.CaptureFixture[str]) -> None:
    r: Rollout = rollout("healthy")
    r.kubectl("patch", "clusterpolicies.nvidia.com", CLUSTER_POLICY, "--type", "merge", "-p", AUTO_ON)
    capsys.readouterr()
    code = main(["plan", "--dry-run", "--kubeconfig", str(r.kubeconfig), "-o", "json"])
    result = json.loads(capsys.readouterr().out)
    kinds = [(f["kind"], f["severity"]) for f in result["findings"] if f["node"] is None]
    assert ("gpu-operator-auto-upgrade", "blocking") in kinds
    assert code == 1
