"""The rollout status: phase and message, nodes per state, blocked and failed nodes, halt rules."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.fleet.managed import fleet
from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    FAILED_AT,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    State,
)
from upgrader.core.model.views import Control, NodeView, Snapshot
from upgrader.core.policy.policy import Policy
from upgrader.core.report.document import RolloutStatus, read_status, to_dict
from upgrader.core.report.entries import NodeBlocked, NodeWaiting
from upgrader.core.report.kinds import Phase
from upgrader.core.rollout.phase import Scope, blocked_nodes, halt_reason
from upgrader.core.rollout.schedule import Nodes, Standing, plan_starts
from upgrader.core.rollout.starts import acknowledged_failures
from upgrader.core.rollout.status import Decided, rollout_status

from .factories import NEW, T0, at, driver_pod, node, policy, snapshot

S = State
PDB_REASON = (
    "eviction of default/web-0 refused by PodDisruptionBudget default/web "
    "(disruptionsAllowed=0, currentHealthy=2, desiredHealthy=2)"
)
VALIDATION_REASON = "not done within the 600s timeout: validator pod gpu-operator/v not Ready"


def pdb_blocked(
    name: str, zone: str = "a", since: float = 40, state: State = S.POD_DELETION_REQUIRED
) -> NodeView:
    return node(
        name,
        state,
        zone=zone,
        annotations={BLOCKED_KIND: "pdb", BLOCKED_REASON: PDB_REASON, BLOCKED_SINCE: at(since)},
    )


def failed(name: str, zone: str, at_s: float = 60, reason: str = VALIDATION_REASON) -> NodeView:
    return node(
        name,
        S.FAILED,
        zone=zone,
        annotations={
            FAILED_KIND: "validation",
            FAILED_STATE: S.VALIDATION_REQUIRED.value,
            FAILED_REASON: reason,
            FAILED_AT: at(at_s),
        },
    )


def status(
    nodes: list[NodeView],
    pol: Policy | None = None,
    control: Control | None = None,
    now: float = T0 + 100,
    waiting: list[NodeWaiting] | None = None,
    with_schedule: bool = True,
) -> dict[str, Any]:
    pol = pol or Policy()
    snap: Snapshot = snapshot(nodes, [driver_pod(n.name, revision=NEW) for n in nodes], control=control)
    f = fleet(snap)
    acknowledged = acknowledged_failures(snap)
    schedule = plan_starts(Nodes(f.managed), pol, now, True, Standing(acknowledged)) if with_schedule else None
    # As the status ConfigMap and `upgrader status -o json` hold it: what a person and a script read.
    return to_dict(rollout_status(snap, pol, Scope(f), now, acknowledged, Decided(schedule, waiting)))


def test_nodes_by_state_lists_every_state_with_zeros() -> None:
    result = status([node("a", S.DONE), node("b", S.DONE), node("c", S.VALIDATION_REQUIRED), node("d", None)])
    assert result["nodes_by_state"] == {
        "upgrade-required": 0,
        "cordon-required": 0,
        "wait-for-jobs-required": 0,
        "pod-deletion-required": 0,
        "drain-required": 0,
        "pod-restart-required": 0,
        "validation-required": 1,
        "uncordon-required": 0,
        "upgrade-done": 2,
        "upgrade-failed": 0,
        "unlabelled": 1,
    }
    assert result["nodes_total"] == 4


def test_a_blocked_node_halts_the_rollout_naming_node_state_reason_and_since() -> None:
    result = status(
        [node("n1", S.DONE, zone="a"), pdb_blocked("n2"), node("n3", S.UPGRADE_REQUIRED, zone="a")]
    )
    assert result["blocked"] == [
        {
            "node": "n2",
            "state": "pod-deletion-required",
            "kind": "pdb",
            "reason": PDB_REASON,
            "since": at(40),
            "runbook": "runbooks/pdb-blocked-eviction.md",
        }
    ]
    assert result["phase"] == "Halted"
    expected = (
        f"n2 blocked in pod-deletion-required since {at(40)}: {PDB_REASON}; "
        "see runbooks/pdb-blocked-eviction.md"
    )
    assert result["halt_reason"] == expected
    assert result["message"] == "halted: " + expected


def test_several_blocked_nodes_name_the_first_and_count_the_rest() -> None:
    result = status(
        [pdb_blocked("n2"), pdb_blocked("n1", since=10), pdb_blocked("n3")], policy(maxParallelUpgrades=3)
    )
    assert result["halt_reason"] == (
        f"n1 blocked in pod-deletion-required since {at(10)}: {PDB_REASON} (and 2 more blocked); "
        "see runbooks/pdb-blocked-eviction.md"
    )
    assert [b["node"] for b in result["blocked"]] == ["n1", "n2", "n3"]


def test_a_block_with_an_unknown_kind_points_at_the_generic_runbook() -> None:
    view = node("n1", S.DRAIN_REQUIRED, annotations={BLOCKED_KIND: "mystery", BLOCKED_SINCE: at(1)})
    (entry,) = blocked_nodes(snapshot([view]), ["n1"])
    assert entry == NodeBlocked("n1", "drain-required", "mystery", "", at(1), "runbooks/rollout-halted.md")


def test_an_unacknowledged_canary_failure_halts() -> None:
    result = status(
        [failed("a1", "a"), node("a2", S.DONE, zone="a"), node("b1", S.UPGRADE_REQUIRED, zone="b")],
        policy(onNodeFailure="continue"),
    )
    assert result["phase"] == "Halted"
    assert result["message"] == (
        f"halted: a1 upgrade-failed in validation-required (canary domain a) at {at(60)}: {VALIDATION_REASON}; "
        "see runbooks/validation-failure.md"
    )
    assert result["failed"] == [
        {
            "node": "a1",
            "kind": "validation",
            "reason": VALIDATION_REASON,
            "since": at(60),
            "acknowledged": False,
            "state": "validation-required",
            "runbook": "runbooks/validation-failure.md",
            "during_pause": False,
        }
    ]


def test_a_failure_halt_message_names_the_state() -> None:
    result = status([failed("a1", "a"), node("b1", S.UPGRADE_REQUIRED, zone="b")])
    assert "upgrade-failed" in result["message"]


@pytest.mark.parametrize(
    ("on_failure", "phase", "message"),
    [
        (
            "halt",
            "Halted",
            f"halted: b1 upgrade-failed in validation-required (domain b) at {at(60)}: {VALIDATION_REASON}; "
            "see runbooks/validation-failure.md",
        ),
        ("continue", "Running", "rolling"),
    ],
)
def test_a_failure_outside_the_canary_halts_only_under_halt(
    on_failure: str, phase: str, message: str
) -> None:
    nodes = [node("a1", S.DONE, zone="a"), failed("b1", "b"), node("b2", S.CORDON_REQUIRED, zone="b")]
    result = status(nodes, policy(onNodeFailure=on_failure))
    assert (result["phase"], result["message"]) == (phase, message)


def test_the_canary_is_the_policys_canary() -> None:
    nodes = [failed("b1", "b"), node("a1", S.DONE, zone="a")]
    result = status(nodes, policy(onNodeFailure="continue", failureDomains={"canary": "b"}))
    assert result["message"].startswith(
        "halted: b1 upgrade-failed in validation-required (canary domain b) at "
    )
    assert [(d["name"], d["canary"]) for d in result["domains"]] == [("b", True), ("a", False)]


@pytest.mark.parametrize(
    ("named", "phase"),
    [(None, "Halted"), (at(59), "Halted"), (at(60), "Done")],
)
def test_acknowledging_the_failure_as_recorded_lets_the_rollout_finish(named: str | None, phase: str) -> None:
    nodes = [failed("a1", "a", at_s=60), node("a2", S.DONE, zone="a"), node("b1", S.DONE, zone="b")]
    result = status(nodes, control=Control(acknowledged={"a1": named} if named else {}))
    assert result["phase"] == phase
    assert result["failed"][0]["acknowledged"] is (phase == "Done")
    if phase == "Done":
        assert result["message"] == "done: 2 of 3 nodes upgraded, 1 failed"


def test_a_failure_after_an_acknowledgement_halts_again() -> None:
    nodes = [failed("a1", "a", at_s=10), failed("a2", "a", at_s=80), node("b1", S.UPGRADE_REQUIRED, zone="b")]
    result = status(nodes, control=Control(acknowledged={"a1": at(10)}))
    assert result["phase"] == "Halted"
    assert result["message"].startswith(
        f"halted: a2 upgrade-failed in validation-required (canary domain a) at {at(80)}: "
    )
    assert [(f["node"], f["acknowledged"]) for f in result["failed"]] == [("a1", True), ("a2", False)]


def test_a_pause_over_a_block_says_resume_alone_does_not_go_on() -> None:
    result = status([pdb_blocked("n1")], control=Control(paused=True))
    assert result["phase"] == "Paused"
    assert result["message"].startswith(f"paused by an operator, and halted: {result['halt_reason']}")
    assert result["message"].endswith("; `upgrader resume` ends the pause; the block ends when its cause is gone")
    assert result["halt_reason"] is not None  # still said, for `upgrader status`


def test_a_canary_that_failed_during_the_pause_is_said_first_and_names_the_acknowledgement() -> None:
    """The pause began at T0+30 (the last status recorded it); a2 failed at T0+80, a1 before it."""
    nodes = [failed("a1", "a", at_s=10), failed("a2", "a", at_s=80), node("b1", S.UPGRADE_REQUIRED, zone="b")]
    previous = RolloutStatus(Phase.PAUSED, "paused by an operator", paused=True, paused_since=at(30))
    result = status(nodes, control=Control(paused=True, acknowledged={"a1": at(10)}, previous=previous))
    assert result["phase"] == "Paused"
    assert result["paused_since"] == at(30)
    assert [(f["node"], f["during_pause"]) for f in result["failed"]] == [("a2", True), ("a1", False)]
    assert result["message"] == (
        f"paused by an operator, and halted: {result['halt_reason']}; failed during the pause: a2; "
        "`upgrader resume` ends the pause, `upgrader acknowledge a2` the failure"
    )


def test_a_pause_alone_says_resume_continues() -> None:
    result = status([node("n1", S.UPGRADE_REQUIRED)], control=Control(paused=True))
    assert (result["phase"], result["message"]) == ("Paused", "paused by an operator; `upgrader resume` continues")


def test_auto_upgrade_off_gives_paused() -> None:
    result = status([node("n1", S.UPGRADE_REQUIRED)], policy(autoUpgrade=False))
    assert (result["phase"], result["message"]) == ("Paused", "autoUpgrade is false in the policy")


def test_all_done_gives_done() -> None:
    result = status([node("a", S.DONE), node("b", S.DONE)])
    assert (result["phase"], result["message"], result["halt_reason"]) == (
        "Done",
        "done: 2 of 2 nodes upgraded",
        None,
    )


@pytest.mark.parametrize(
    "nodes",
    [
        [node("a", S.DONE), node("b", None)],  # not labelled yet
        [node("a", S.DONE), node("b", S.UPGRADE_REQUIRED)],
        [node("a", S.DONE), node("b", S.UNCORDON_REQUIRED)],
    ],
)
def test_not_done_while_anything_is_pending(nodes: list[NodeView]) -> None:
    assert status(nodes)["phase"] == "Running"


def test_running_says_why_nothing_starts() -> None:
    nodes = [node("a", S.POD_RESTART_REQUIRED, zone="a"), node("b", S.UPGRADE_REQUIRED, zone="a")]
    result = status(nodes, policy(maxUnavailable=4))
    assert (result["phase"], result["message"]) == ("Running", "maxParallelUpgrades 1 reached: a (in progress)")
    assert status(nodes, with_schedule=False)["message"] == "rolling"


def test_domains_budget_and_lists() -> None:
    nodes = [
        node("a1", S.DONE, zone="a"),
        node("a2", S.POD_RESTART_REQUIRED, zone="a"),
        node("b1", S.UPGRADE_REQUIRED, zone="b"),
        failed("b2", "b"),
        node("x1", S.DONE, zone="a", labels={"nvidia.com/gpu-driver-upgrade.skip": "true"}),
    ]
    waiting = [
        NodeWaiting("a2", "pod-restart-required", "restarting", at(1)),
        NodeWaiting("gone", "cordon-required", "?", at(1)),
    ]
    result = status(
        nodes, policy(maxParallelUpgrades=2, maxUnavailable="50%", onNodeFailure="continue"), waiting=waiting
    )
    zeros = {s.value: 0 for s in S} | {"unlabelled": 0}
    assert result["domains"] == [
        {"name": "a", "canary": True, "nodes": 2, "done": 1, "in_progress": 1, "failed": 0,
         "by_state": {**zeros, "upgrade-done": 1, "pod-restart-required": 1}},
        {"name": "b", "canary": False, "nodes": 2, "done": 0, "in_progress": 0, "failed": 1,
         "by_state": {**zeros, "upgrade-required": 1, "upgrade-failed": 1}},
    ]
    assert result["in_progress"] == [{"node": "a2", "state": "pod-restart-required", "since": ""}]
    assert result["current_domain"] == "a"
    assert result["budget"] == {
        "in_progress": 1,
        "max_parallel_upgrades": 2,
        "unavailable": 2,
        "max_unavailable": 2,
    }
    assert result["skipped"] == ["x1"]
    assert result["waiting"] == [
        {"node": "a2", "state": "pod-restart-required", "reason": "restarting", "since": at(1)}
    ]
    assert result["updated_at"] == at(100)


def test_budget_without_a_schedule() -> None:
    result = status([node("a", S.CORDON_REQUIRED), node("b", S.DONE)], with_schedule=False)
    assert result["budget"] == {
        "in_progress": 1,
        "max_parallel_upgrades": 1,
        "unavailable": None,
        "max_unavailable": 1,
    }
    assert result["current_domain"] is None


def test_invalid_nodes_are_listed_with_their_reason() -> None:
    bad = node("bad", None, invalid="label nvidia.com/gpu-driver-upgrade-state: unknown upgrade state 'x'")
    result = status([node("ok", S.DONE), bad])
    assert result["invalid"] == [
        {"node": "bad", "reason": "label nvidia.com/gpu-driver-upgrade-state: unknown upgrade state 'x'"}
    ]
    assert result["nodes_total"] == 1
    assert result["phase"] == "Done"


def test_meaningful_ignores_only_the_timestamp() -> None:
    nodes = [node("a", S.DONE)]
    first, later = status(nodes, now=T0 + 1), status(nodes, now=T0 + 500)
    assert first != later
    settled = [read_status(s).settled() for s in (first, later)]  # type: ignore[union-attr]
    assert settled[0] == settled[1]
    assert settled[0].updated_at == ""


def test_halt_reason_is_none_when_nothing_is_wrong() -> None:
    snap = snapshot([node("a", S.DONE), node("b", S.VALIDATION_REQUIRED)])
    assert halt_reason(snap, Policy(), ["a", "b"], set()) is None


@pytest.mark.parametrize("state", [S.DONE, S.UPGRADE_REQUIRED])
def test_block_annotations_left_on_a_node_out_of_progress_do_not_halt(state: State) -> None:
    leftover = node(
        "n1",
        state,
        zone="a",
        annotations={BLOCKED_KIND: "pdb", BLOCKED_REASON: PDB_REASON, BLOCKED_SINCE: at(40)},
    )
    result = status([leftover, node("n2", S.DONE, zone="a")])
    assert result["blocked"] == []
    assert result["phase"] != "Halted"
