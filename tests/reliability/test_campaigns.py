"""Crash, two-replica, API-fault and disturbance campaigns: short in CI, full with UPGRADER_CAMPAIGN=full
(see campaigns.py, campaign_world.py and disturbance_campaign.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from upgrader.core.model.states import FAILED_AT, STATE_LABEL, State
from upgrader.core.policy.parts import FailureDomains
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.core.policy.rollout_object import GROUP, PLURAL, VERSION
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.disturbed_audit import DisturbedAudit
from upgrader.sim.proving.invariants import RolloutRecorder
from upgrader.sim.proving.recording import ZONE_LABEL

from .campaign_world import FULL, ORDER, ROLLOUT, Figures, create_rollout
from .campaigns import fault_campaign, kill_campaign, replica_campaign
from .disturbance_campaign import DISTURBANCES, LAG, disturbance_campaign, ordered_policy
from .promotion import past_canary_nodes

PATHS = ("adoptions", "drain fallbacks", "failed nodes recovered", "restart-only restarts")


def took_the_operators_paths(figures: Figures, pooled: bool = True) -> None:
    """The campaign was not vacuous for the GPU Operator's paths: each happened in its rollouts; and,
    with the pooled policy, every rollout's gate was promoted and its two pools went side by side."""
    assert all(figures.counts[path] >= 1 for path in PATHS), figures.line()
    if pooled:
        assert figures.counts["promotions"] >= figures.rollouts >= 1, figures.line()
        assert figures.counts["pools side by side"] == figures.rollouts, figures.line()


def test_sigkill_campaign(tmp_path: Path) -> None:
    figures = kill_campaign(tmp_path, kills=100 if FULL else 6, seed=20261129)
    print(figures.line())
    assert figures.counts["kills"] >= (100 if FULL else 6)
    assert figures.violations == []
    took_the_operators_paths(figures)


def test_two_replicas_campaign(tmp_path: Path) -> None:
    figures = replica_campaign(tmp_path, rollouts=8 if FULL else 2, seed=7)
    print(figures.line())
    assert figures.counts["leader kills"] >= (4 if FULL else 1)
    assert figures.violations == []
    took_the_operators_paths(figures)


def test_api_fault_campaign(tmp_path: Path) -> None:
    figures = fault_campaign(tmp_path, rollouts=6 if FULL else 1, seed=5)
    print(figures.line())
    injected = sum(v for k, v in figures.counts.items() if k.startswith("injected"))
    assert injected > 0, "faults were really injected"
    kinds = {"injected error500", "injected throttle429", "injected conflict409", "injected drop"}
    assert kinds <= set(figures.counts), "every fault kind was injected"
    assert figures.violations == []
    took_the_operators_paths(figures)


def test_disturbance_campaign(tmp_path: Path) -> None:
    figures = disturbance_campaign(tmp_path, rollouts=6 if FULL else 1, seed=11, disturb_seconds=30 if FULL else 16)
    print(figures.line())
    assert figures.violations == []
    # Every kind in every rollout (the API server replaced at least once in each), latency for real.
    assert figures.counts["kinds never applied"] == 0 and all(figures.counts[k] >= 1 for k in DISTURBANCES)
    assert figures.counts["requests delayed"] > 0, figures.line()
    # A spec patch of the domain order was put in force by a pass, no restart, and the audit judged by it.
    assert figures.counts["domain orders a pass put in force"] >= 1, figures.line()
    # The other writers and clocks for real: a cordon landed in the window before upgrader's own, the
    # CLI ran minutes off, a failure was acknowledged from it, and the rollout's status wiped while paused
    # came back Paused (the status ConfigMap deleted while paused, before the object).
    for seen in ("admin cordons in the window before upgrader's own", "CLI runs with a skewed clock",
                 "operator: acknowledge", "status written again as Paused"):
        assert figures.counts[seen] >= 1, (seen, figures.line())
    assert figures.counts["CLI clock skew, largest (s)"] >= 60, figures.line()
    assert figures.counts["replica clock skew, largest (s)"] >= 60, figures.line()


# ----- the disturbed-rollout audit itself: it catches what it must, and excuses only races -----------

class Fleet:
    """Nine nodes, three per zone, all upgrade-required, and the rollout object; writes as upgrader or as a person."""

    def __init__(self) -> None:
        self.cluster = EmulatedCluster.virtual()
        self.info = build(self.cluster, "healthy", 9)
        for name in self.info.nodes:
            self.label(name, State.UPGRADE_REQUIRED.value)
        spec = {**ordered_policy(ORDER), "maxUnavailable": "50%"}  # maxParallel 2
        create_rollout(self.cluster, spec)
        self.recorder = RolloutRecorder(self.cluster, rollout=ROLLOUT)
        self.policy = policy_from_mapping(spec)
        self.recorder.policy_in_effect(self.policy)

    def write(self, name: str, body: dict[str, Any], who: str | None = None) -> None:
        with self.recorder.by_hand(who) if who else contextlib.nullcontext():
            self.cluster.store.patch(self.cluster.type("nodes"), None, name, "application/merge-patch+json", body)

    def label(self, name: str, state: str, who: str | None = None) -> None:
        self.write(name, {"metadata": {"labels": {STATE_LABEL: state}}}, who)

    def cordon(self, name: str, on: bool, who: str | None = None) -> None:
        self.write(name, {"spec": {"unschedulable": True if on else None}}, who)

    def control(self, spec: dict[str, Any]) -> None:
        """`upgrader pause` / `acknowledge` as the object's spec holds them (the control ConfigMap's data, before)."""
        with self.recorder.by_hand("operator"):
            self.cluster.store.patch(self.cluster.type(PLURAL, GROUP, VERSION), None, ROLLOUT,
                                     "application/merge-patch+json", {"spec": spec})

    def fail(self, name: str, at: str) -> None:
        self.write(name, {"metadata": {"labels": {STATE_LABEL: State.FAILED.value}, "annotations": {FAILED_AT: at}}})

    def start(self, name: str) -> None:
        self.recorder.pass_begins()
        self.label(name, State.CORDON_REQUIRED.value)
        self.cordon(name, True)

    def audit(self) -> DisturbedAudit:
        return self.recorder.check_disturbed(self.policy, set(self.info.nodes), lag=LAG)


def test_the_audit_judges_a_start_by_zones_now_and_excuses_one_decided_before_a_relabel() -> None:
    f = Fleet()
    f.start("gpu-a-01")
    f.recorder.pass_begins()  # this pass reads a-01 in us-east-1a ...
    f.write("gpu-a-01", {"metadata": {"labels": {ZONE_LABEL: "us-east-1c"}}}, "admin")  # ... then this lands
    f.label("gpu-a-02", State.CORDON_REQUIRED.value)
    assert f.audit().violations == [] and len(f.audit().excused) == 1
    f.cluster.advance(LAG + 1)
    f.label("gpu-a-02", State.DONE.value)
    f.start("gpu-a-03")  # decided on a copy that had the relabel
    (line,) = f.audit().violations
    assert "gpu-a-03 (domain us-east-1a) started while ['gpu-a-01 (us-east-1c)'] of other domains ran" in line


def test_the_audit_keeps_an_unreadable_label_in_the_budget() -> None:
    f = Fleet()
    f.start("gpu-a-01")
    f.start("gpu-a-02")
    f.label("gpu-a-01", "bogus", "admin")  # still cordoned: still unavailable
    for name in ("gpu-b-01", "gpu-b-02", "gpu-c-01"):
        f.cordon(name, True, "admin")
    f.cluster.advance(LAG + 1)
    f.start("gpu-a-03")
    (line,) = f.audit().violations
    down = ["gpu-a-01", "gpu-a-02", "gpu-a-03", "gpu-b-01", "gpu-b-02", "gpu-c-01"]
    assert f"{down} unavailable > maxUnavailable 5" in line  # 50% of 9, rounded up


def test_the_audit_follows_whose_cordon_it_is_back_through_a_restore() -> None:
    f = Fleet()
    f.cordon("gpu-a-01", True, "admin")
    with f.cluster.store.lock:
        backup, token = f.cluster.backup(), f.recorder.backup_taken()
    f.cordon("gpu-a-01", False, "admin")
    with f.recorder.restoring(token):  # the admin's cordon comes back with the older state
        f.cluster.restore_from(backup)
    f.start("gpu-a-01")  # free: already cordoned
    for state in (State.WAIT_FOR_JOBS_REQUIRED, State.POD_RESTART_REQUIRED, State.UNCORDON_REQUIRED):
        f.label("gpu-a-01", state.value)
    f.cordon("gpu-a-01", False)
    assert f.recorder.foreign_cordons(set(f.info.nodes)) == set()
    (line,) = f.audit().violations
    assert line.endswith("gpu-a-01 was cordoned by someone else and got uncordoned")


def test_the_audit_holds_starts_while_paused_excusing_only_a_pass_that_began_before_the_pause() -> None:
    f = Fleet()
    f.start("gpu-a-01")
    f.control({"paused": True})
    f.start("gpu-a-02")  # its pass read the cluster just before the pause landed
    assert f.audit().violations == [] and len(f.audit().excused) == 1
    for name in ("gpu-a-01", "gpu-a-02"):
        f.label(name, State.UNCORDON_REQUIRED.value)
        f.cordon(name, False)
        f.label(name, State.DONE.value)
    f.cluster.advance(LAG + 1)
    f.start("gpu-a-03")
    (line,) = f.audit().violations
    assert line.endswith("gpu-a-03 started while paused"), line


def test_the_audit_lets_an_acknowledged_failure_go_and_holds_a_later_failure_of_the_same_node() -> None:
    f = Fleet()
    f.start("gpu-a-01")
    f.fail("gpu-a-01", "2026-01-01T00:00:05Z")
    f.control({"acknowledgedFailures": [{"node": "gpu-a-01", "failedAt": "2026-01-01T00:00:05Z"}]})
    f.cluster.advance(LAG + 1)
    f.start("gpu-a-02")
    assert f.audit().violations == []
    f.fail("gpu-a-01", "2026-01-01T00:00:09Z")  # retried, and failed again: a new failure
    f.cluster.advance(LAG + 1)
    f.start("gpu-a-03")
    (line,) = f.audit().violations
    assert line.endswith("gpu-a-03 started while the rollout was halted by ['gpu-a-01']"), line


def test_the_audit_excuses_a_start_racing_an_admin_cordon_in_a_pass_that_read_the_resume() -> None:
    """The pass began while paused and read the resume as it ran (its start says so); an admin's
    cordon that landed meanwhile is what it could not have seen."""
    f = Fleet()
    for name in ("gpu-b-01", "gpu-b-02", "gpu-c-01", "gpu-c-02"):
        f.cordon(name, True, "admin")
    f.control({"paused": True})
    f.cluster.advance(LAG + 1)
    f.recorder.pass_begins()
    f.control({"paused": False})
    f.cordon("gpu-c-03", True, "admin")  # the fifth unavailable node: maxUnavailable 5 reached
    f.label("gpu-a-01", State.CORDON_REQUIRED.value)
    audit = f.audit()
    assert audit.violations == [] and len(audit.excused) == 1, audit


def test_the_audit_excuses_a_start_of_a_pass_that_read_a_resume_and_not_the_pause_after_it() -> None:
    """A slow pass: it read the resume, decided two starts, and the operator paused again before the
    second was written."""
    f = Fleet()
    f.control({"paused": True})
    f.cluster.advance(LAG + 1)
    f.recorder.pass_begins()
    f.control({"paused": False})
    f.label("gpu-a-01", State.CORDON_REQUIRED.value)
    f.control({"paused": True})
    f.label("gpu-a-02", State.CORDON_REQUIRED.value)  # decided with the first, on the same snapshot
    audit = f.audit()
    assert audit.violations == [] and len(audit.excused) == 1, audit
    f.label("gpu-a-01", State.DONE.value)
    f.cluster.advance(LAG + 1)
    f.recorder.pass_begins()
    f.label("gpu-a-03", State.CORDON_REQUIRED.value)  # a pass that began after the pause: never excused
    (line,) = f.audit().violations
    assert line.endswith("gpu-a-03 started while paused"), line


# ----- the promotion audit: a start past the canary nodes, judged by the zones it saw --------------

CANARY_NODE = FailureDomains.model_validate({"canary": "us-east-1a", "canaryNodes": 1})


def past_the_canary_node(f: Fleet) -> list[str]:
    return [node for _, node in past_canary_nodes(f.recorder.records, set(f.info.nodes), CANARY_NODE)]


def test_the_promotion_audit_holds_upgraders_starts_past_the_canary_node_not_another_writers() -> None:
    f = Fleet()
    f.start("gpu-a-01")  # the canary node
    f.label("gpu-a-02", State.CORDON_REQUIRED.value, "gpu-operator")  # another controller's move
    f.label("gpu-b-01", State.CORDON_REQUIRED.value)  # upgrader's, in another domain
    assert past_the_canary_node(f) == []
    f.label("gpu-a-02", State.UPGRADE_REQUIRED.value, "gpu-operator")
    f.start("gpu-a-02")  # upgrader's own: past the canary node
    f.start("gpu-a-03")
    assert past_the_canary_node(f) == ["gpu-a-02", "gpu-a-03"]


def test_the_promotion_audit_takes_a_node_relabelled_out_of_the_canary_domain_out_of_it() -> None:
    f = Fleet()
    f.start("gpu-a-01")
    f.write("gpu-a-01", {"metadata": {"labels": {ZONE_LABEL: "us-east-1c"}}}, "admin")
    f.start("gpu-a-02")  # the canary domain's first node now: its canary node, as the controller sees it
    assert past_the_canary_node(f) == []
    f.start("gpu-a-03")
    assert past_the_canary_node(f) == ["gpu-a-03"]


def test_the_promotion_audit_lets_a_canary_node_start_again_and_a_lone_one_be_the_whole_canary() -> None:
    f = Fleet()
    f.start("gpu-a-01")
    f.label("gpu-a-01", State.UPGRADE_REQUIRED.value, "admin")  # set back by hand: it starts again
    f.start("gpu-a-01")
    assert past_the_canary_node(f) == []
    for name in ("gpu-a-01", "gpu-a-02"):  # the canary domain keeps one node: canaryNodes 1 is all of it
        f.write(name, {"metadata": {"labels": {ZONE_LABEL: "us-east-1b"}}}, "admin")
    f.start("gpu-a-03")
    assert past_the_canary_node(f) == []
