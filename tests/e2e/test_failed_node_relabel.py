"""What runbooks/missing-driver-image.md tells an operator about retrying a failed node, checked on the
emulator (virtual clock): relabelling it `upgrade-required` without the requested annotation runs the
whole upgrade again; it is never marked done without a driver. Once the image exists, the node
recovers by itself."""

from __future__ import annotations

from typing import Any

from tests.shown import shown
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import FAILED_AT, REQUESTED_ANNOTATION, STATE_LABEL, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import DRIVER_REPO, NEW_DRIVER, UNBUILT_KERNEL, build, driver_tag
from upgrader.sim.proving.invariants import RolloutRecorder

MERGE = "application/merge-patch+json"
CYCLE = [s.value for s in (State.CORDON_REQUIRED, State.WAIT_FOR_JOBS_REQUIRED, State.POD_DELETION_REQUIRED,
                           State.POD_RESTART_REQUIRED)]


class Failed:
    """The missing-image scenario run until its odd node fails in pod-restart-required."""

    def __init__(self) -> None:
        self.cluster = EmulatedCluster.virtual()
        info = build(self.cluster, "missing-image")
        assert info.missing_image_node is not None
        self.node = info.missing_image_node
        self.recorder = RolloutRecorder(self.cluster)
        api = KubeApi(self.cluster.client(), sleep=lambda _: None)
        policy = policy_from_mapping({"podRestart": {"timeoutSeconds": 60}})
        self.controller = Controller(api, policy, Settings(identity="relabel"), self.cluster.store.clock.now)
        self.run(240)
        assert self.label() == State.FAILED.value

    def run(self, seconds: int) -> dict[str, Any]:
        status: dict[str, Any] = {}
        for _ in range(seconds):
            status = shown(self.controller.reconcile().status)
            self.cluster.advance(1)
        return status

    def obj(self) -> dict[str, Any]:
        node = self.cluster.get("nodes", self.node)
        assert node is not None
        return node

    def label(self) -> str | None:
        return self.obj()["metadata"]["labels"].get(STATE_LABEL)

    def relabel(self) -> int:
        """What the runbook's step shows, minus the annotation: the state label alone. Returns where the
        node's history stood."""
        assert REQUESTED_ANNOTATION not in self.obj()["metadata"].get("annotations", {})
        patch = {"metadata": {"labels": {STATE_LABEL: State.UPGRADE_REQUIRED.value}}}
        self.cluster.store.patch(self.cluster.type("nodes"), "", self.node, MERGE, patch)
        return len(self.states())

    def states(self) -> list[str | None]:
        return [r.state for r in self.recorder.records if r.node == self.node]

    def publish(self) -> None:
        self.cluster.settings.registry[DRIVER_REPO].add(driver_tag(NEW_DRIVER, UNBUILT_KERNEL))


def _steps(states: list[str | None]) -> list[str | None]:
    """The states in order, each once per stay (a record is kept per node change, annotations too)."""
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def _ran_again(states: list[str | None]) -> bool:
    """The states after the relabel go through the upgrade's steps again, in order."""
    return _steps([s for s in states if s in CYCLE]) == CYCLE


def test_a_relabel_without_the_annotation_runs_the_upgrade_again_and_fails_again() -> None:
    f = Failed()
    mark = f.relabel()
    status = f.run(240)
    after = f.states()[mark:]
    assert _ran_again(after), after
    assert State.DONE.value not in after, "never marked done without a driver"
    assert after[-1] == State.FAILED.value and f.obj()["metadata"]["annotations"].get(FAILED_AT)
    assert f.obj()["spec"].get("unschedulable"), "still cordoned"
    assert status["phase"] == "Halted"


def test_a_relabel_without_the_annotation_after_the_image_is_published_upgrades_the_node() -> None:
    f = Failed()
    f.publish()
    mark = f.relabel()
    status = f.run(240)
    after = f.states()[mark:]
    assert _ran_again(after), after
    done = [State.VALIDATION_REQUIRED.value, State.UNCORDON_REQUIRED.value, State.DONE.value]
    assert _steps(after)[-3:] == done, after
    assert not f.obj()["spec"].get("unschedulable")
    assert status["phase"] == "Done"


def test_once_the_image_is_published_a_failed_node_recovers_without_a_relabel() -> None:
    f = Failed()
    mark = len(f.states())
    f.publish()
    f.run(240)
    after = _steps(f.states()[mark - 1:])  # from the node's last state before the image came
    assert after == [State.FAILED.value, State.VALIDATION_REQUIRED.value, State.UNCORDON_REQUIRED.value,
                     State.DONE.value], after  # not run again: the kubelet's retry brought the driver up
