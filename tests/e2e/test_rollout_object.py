"""The DriverRollout object as the only source of intent (`run --rollout`), on a virtual clock: a
spec the controller refuses changes nothing and says why, a valid one takes effect at the next pass,
budgets raised mid-rollout, a pause and a resume as spec changes, a refused change mid-rollout
leaves the spec in force (also across a restart), and a pause an older upgrader kept in its
control ConfigMap is carried over (docs/operations.md#migrating-from-the-status-configmap)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from upgrader.controller.intent import RolloutIntent
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import IN_PROGRESS, State
from upgrader.core.policy.policy import Policy
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.catalog import DEFAULT_NODES
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder

ROOT = Path(__file__).resolve().parents[2]
MERGE = "application/merge-patch+json"
SPEC: dict[str, Any] = {
    "maxParallelUpgrades": 1,
    "maxUnavailable": "50%",
    "failureDomains": {"canary": "us-east-1a"},
    "waitForCompletion": {"podSelector": "app=batch-eval", "timeoutSeconds": 30},
}
NOWHERE = (
    'driverrollout.gpu-upgrader.io/default: spec.failureDomains.canary: "nowhere" is not the zone of any managed '
    "GPU node (zones: us-east-1a, us-east-1b, us-east-1c)"
)


class World:
    def __init__(self, spec: dict[str, Any], scenario: str = "healthy", nodes: int = DEFAULT_NODES) -> None:
        self.cluster = EmulatedCluster.virtual()
        self.info = build(self.cluster, scenario, nodes)
        crds = self.cluster.type("customresourcedefinitions", "apiextensions.k8s.io")
        self.cluster.store.create(crds, None, yaml.safe_load((ROOT / "deploy" / "crd.yaml").read_text()))
        self.rtype = self.cluster.type("driverrollouts", "gpu-upgrader.io", "v1alpha1")
        body = {"apiVersion": "gpu-upgrader.io/v1alpha1", "kind": "DriverRollout", "metadata": {"name": "default"}}
        self.cluster.store.create(self.rtype, None, {**body, "spec": spec})
        self.recorder = RolloutRecorder(self.cluster, rollout="default")
        self.controller = self.start()

    def start(self) -> Controller:
        """A controller as `run --rollout default` builds it (controller/runner.py)."""
        api = KubeApi(self.cluster.client(), sleep=lambda _: None)
        settings = Settings(identity="virtual")
        intent = RolloutIntent(api, "default", settings)
        intent.read()
        chosen = intent.starting_policy()
        controller = Controller(api, chosen[0] if chosen else Policy(), settings, self.cluster.store.clock.now)
        controller.intent = intent
        return controller

    def patch(self, spec: dict[str, Any]) -> None:
        self.cluster.store.patch(self.rtype, None, "default", MERGE, {"spec": spec})

    @property
    def obj(self) -> dict[str, Any]:
        return self.cluster.store.get(self.rtype, None, "default")

    def condition(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.obj["status"]["conditions"] if c["type"] == kind)

    def serve(self, tmp: Path) -> str:
        """Serve the emulator over HTTP for the CLI: the path of a kubeconfig that reaches it."""
        self.cluster.serve()
        return str(self.cluster.write_kubeconfig(tmp / "kubeconfig"))

    def waiting_on(self) -> dict[str, Any]:
        return dict(self.obj.get("status", {}).get("waitingOn") or {})

    def run_until_waiting(self, reason: str, seconds: int = 120) -> None:
        """Passes a virtual second apart until the object's status waits on `reason` (or `seconds` pass)."""
        for _ in range(seconds):
            self.run(1)
            if self.waiting_on().get("reason") == reason:
                return

    def run(self, seconds: int, until: str | None = None) -> None:
        for _ in range(seconds):
            self.controller.reconcile()
            if until is not None and self.obj.get("status", {}).get("phase") == until:
                return
            self.cluster.advance(1)

    def in_progress_at_most(self, among: set[str] | None = None) -> int:
        """The most nodes in progress at once (of `among`, default all), in the history so far."""
        state: dict[str, str | None] = {}
        most = 0
        for r in self.recorder.records:
            if among is None or r.node in among:
                state[r.node] = r.state
            most = max(most, sum(1 for s in state.values() if s in {x.value for x in IN_PROGRESS}))
        return most


def test_a_refused_spec_moves_nothing_then_the_fixed_spec_rolls_out_with_its_changes() -> None:
    w = World({**SPEC, "failureDomains": {"canary": "nowhere"}})
    w.run(5)
    assert w.recorder.starts() == [] and w.obj["status"]["phase"] == "Invalid"
    valid = w.condition("Valid")
    assert (valid["status"], valid["reason"]) == ("False", "SpecRefused")
    assert valid["message"] == f"{NOWHERE}; no valid spec yet: nothing is started"
    assert w.obj["status"]["observedGeneration"] == 1 and "specInForce" not in w.obj["status"]

    w.patch({"failureDomains": {"canary": "us-east-1a"}})  # generation 2
    w.run(12)
    assert w.condition("Valid")["status"] == "True" and w.obj["status"]["specInForceGeneration"] == 2
    assert w.in_progress_at_most() == 1
    assert w.obj["status"]["currentDomain"] == "us-east-1a", "canary first"

    w.patch({"maxParallelUpgrades": 2})  # generation 3: budgets raised mid-rollout
    w.run(20)
    assert w.in_progress_at_most() == 2, "the raised budget took effect without a restart"

    w.patch({"paused": True})
    w.run(3)
    started = len(w.recorder.starts())
    w.run(30)
    assert len(w.recorder.starts()) == started, "no node starts while spec.paused"
    assert w.obj["status"]["phase"] == "Paused" and w.condition("Paused")["status"] == "True"

    w.patch({"paused": False, "failureDomains": {"canary": "nowhere"}})  # resumed, and a refused change
    w.run(300, until="Done")
    status = w.obj["status"]
    assert status["phase"] == "Done" and status["progress"] == "6/6"
    assert w.condition("Complete")["status"] == "True" and w.condition("Paused")["status"] == "False"
    assert w.condition("Valid")["message"] == f"{NOWHERE}; generation 4 stays in force"
    assert status["specInForceGeneration"] == 4 and status["observedGeneration"] == 5, "the resume was read"
    final = w.recorder.final_states()
    assert set(final.values()) == {State.DONE.value}
    domains = {n: z for z, nodes in w.info.domains.items() for n in nodes}
    raised = w.controller.policy
    assert raised.max_parallel_upgrades == 2
    assert w.recorder.check(raised, domains, "us-east-1a") == []


def test_a_restarted_controller_keeps_the_spec_in_force_when_the_newest_is_refused() -> None:
    w = World(SPEC)
    w.run(5)
    w.patch({"failureDomains": {"canary": "nowhere"}, "maxParallelUpgrades": 3})
    w.run(2)
    w.controller = w.start()  # the old process is gone; the new one reads the object
    assert w.controller.policy.max_parallel_upgrades == 1, "the kept spec, not the refused one"
    w.run(300, until="Done")
    assert w.in_progress_at_most() == 1
    assert w.condition("Valid")["message"] == f"{NOWHERE}; generation 1 stays in force"


def test_a_pause_in_the_old_control_configmap_is_carried_over_until_resume() -> None:
    w = World(SPEC)
    w.cluster.create("configmaps", {"metadata": {"name": "gpu-driver-upgrade-control", "namespace": "gpu-operator"},
                                    "data": {"paused": "true"}})
    w.run(10)
    assert w.recorder.starts() == []
    assert w.obj["status"]["message"] == (
        "paused: carried over from configmap gpu-operator/gpu-driver-upgrade-control (upgrader resume ends it); "
        "`upgrader resume` continues"
    )
    control = w.cluster.get("configmaps", "gpu-driver-upgrade-control", "gpu-operator") or {}
    assert control["data"] == {"paused": "true"}, "the controller writes no intent"
    w.cluster.store.mutate(w.cluster.type("configmaps"), "gpu-operator", "gpu-driver-upgrade-control",
                           lambda cm: cm["data"].update(paused="false"))  # what `upgrader resume` writes there
    w.run(300, until="Done")
    assert w.obj["status"]["phase"] == "Done"


def test_paused_over_a_halt_is_both_paused_and_halted() -> None:
    from dataclasses import replace

    from upgrader.core.policy.rollout_object import Verdict, conditions
    from upgrader.core.report.document import RolloutStatus
    from upgrader.core.report.kinds import Phase

    at = "2026-12-03T10:00:00Z"
    report = RolloutStatus(Phase.PAUSED, "paused", "gpu-a-01 blocked in drain", paused=True, updated_at=at)
    got = {c["type"]: c["status"] for c in conditions("Paused", report, Verdict(1, 1), [], at)}
    assert got == {"Valid": "True", "Paused": "True", "Halted": "True", "Progressing": "False", "Complete": "False"}
    unhalted = replace(report, halt_reason=None)
    got = {c["type"]: c["status"] for c in conditions("Paused", unhalted, Verdict(1, 1), [], at)}
    assert got["Halted"] == "False" and got["Paused"] == "True"
