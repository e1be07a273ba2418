"""When no node can start, the status, its `waiting_on` and one Event per change say why, naming the
nodes behind the wait and, when only a person can end it, what to undo. One test per wait reason,
each with the exact words a user reads."""

from __future__ import annotations

from typing import Any

from upgrader.core.fleet.managed import fleet
from upgrader.core.model.actions import Event, Outcome, Result, WriteStatus
from upgrader.core.model.states import SKIP_LABEL, STATE_LABEL, WAS_UNSCHEDULABLE, State
from upgrader.core.model.views import Control, NodeView
from upgrader.core.policy.policy import Policy
from upgrader.core.report.document import read_status, to_dict
from upgrader.core.rollout.phase import Scope
from upgrader.core.rollout.reconcile import reconcile
from upgrader.core.rollout.starts import start_nodes
from upgrader.core.rollout.status import Decided, rollout_status

from .factories import NEW, OLD, T0, at, driver_pod, node, policy, snapshot

S = State
REQ, DONE = S.UPGRADE_REQUIRED, S.DONE
RUNBOOK = "runbooks/rollout-halted.md"


def wait_for(
    nodes: list[NodeView], pol: Policy, *, previous: dict[str, Any] | None = None, now: float = T0, paused: bool = False
) -> tuple[dict[str, Any], list[Event]]:
    """The status after deciding the starts, as the cluster stores it (what `previous` is, read back
    as the controller reads it), and the Events the starts decided."""
    pods = [driver_pod(n.name, revision=NEW if n.state is DONE else OLD) for n in nodes]
    snap = snapshot(nodes, pods, control=Control(paused=paused, previous=read_status(previous)))
    schedule, actions = start_nodes(snap, pol, now, not paused, set())
    status = rollout_status(snap, pol, Scope(fleet(snap)), now, set(), Decided(schedule))
    return to_dict(status), [a for a in actions if isinstance(a, Event)]


def readme_fleet() -> list[NodeView]:
    """The README's kubectl section: two `kubectl drain`s left gpu-a-01 (upgraded since, its cordon
    kept: not upgrader's) and gpu-c-01 cordoned; maxUnavailable 25% of 6 nodes is 2."""
    return [
        node("gpu-a-01", DONE, zone="us-east-1a", unschedulable=True),
        node("gpu-a-02", REQ, zone="us-east-1a"),
        node("gpu-b-01", REQ, zone="us-east-1b"),
        node("gpu-b-02", REQ, zone="us-east-1b"),
        node("gpu-c-01", REQ, zone="us-east-1c", unschedulable=True),
        node("gpu-c-02", REQ, zone="us-east-1c"),
    ]


README_WAIT = (
    "maxUnavailable 2 reached: gpu-a-01 (cordoned, not by upgrader), gpu-c-01 (cordoned, not by upgrader); "
    "uncordon them or raise maxUnavailable; see runbooks/rollout-halted.md"
)


def test_max_unavailable_held_by_cordons_names_them_and_what_to_undo() -> None:
    status, events = wait_for(readme_fleet(), Policy())
    assert (status["phase"], status["message"]) == ("Running", README_WAIT)
    assert status["waiting_on"] == {
        "reason": "max-unavailable",
        "domain": "us-east-1a",
        "nodes": [
            {"node": "gpu-a-01", "why": "cordoned, not by upgrader"},
            {"node": "gpu-c-01", "why": "cordoned, not by upgrader"},
        ],
        "count": 2,
        "next": "gpu-a-02",
        "until": None,
        "runbook": RUNBOOK,
    }
    assert events == [Event("gpu-a-01", "Warning", f"rollout waiting: {README_WAIT}")]


def test_max_unavailable_names_every_kind_of_holder_and_a_step_for_each() -> None:
    """In progress ends by itself and comes last; NotReady, failed, a skipped node's cordon and an
    unreadable label need a person, each named with its own step."""
    bogus = node("c2", None, zone="c", unschedulable=True, annotations={WAS_UNSCHEDULABLE: "false"},
                 labels={STATE_LABEL: "bogus"}, invalid=f"label {STATE_LABEL}: unknown upgrade state 'bogus'")
    nodes = [
        node("a1", S.POD_RESTART_REQUIRED, zone="a", unschedulable=True),
        node("a2", REQ, zone="a"),
        node("b1", DONE, zone="b", ready=False),
        node("b2", S.FAILED, zone="b"),
        node("c1", REQ, zone="c", unschedulable=True, labels={SKIP_LABEL: "true"}),
        bogus,
    ]
    status, events = wait_for(nodes, policy(maxParallelUpgrades=0, maxUnavailable=5, onNodeFailure="continue"))
    expected = (
        "maxUnavailable 5 reached: b1 (NotReady), b2 (upgrade-failed), c1 (skipped, cordoned, not by upgrader), "
        "c2 (invalid, cordoned by upgrader), a1 (in progress); uncordon c1, bring b1 back to Ready, recover b2 and "
        "fix what makes c2 invalid, or raise maxUnavailable; see runbooks/rollout-halted.md"
    )
    assert status["message"] == expected
    assert [n["node"] for n in status["waiting_on"]["nodes"]] == ["b1", "b2", "c1", "c2", "a1"]
    assert events == [Event("b1", "Warning", f"rollout waiting: {expected}")]


def test_max_unavailable_held_by_nodes_in_progress_ends_by_itself() -> None:
    nodes = [node("a1", S.VALIDATION_REQUIRED, zone="a"), node("a2", REQ, zone="a"), node("a3", REQ, zone="a")]
    status, events = wait_for(nodes, policy(maxParallelUpgrades=2, maxUnavailable=1))
    assert status["message"] == "maxUnavailable 1 reached: a1 (in progress)"
    assert (status["waiting_on"]["reason"], status["waiting_on"]["runbook"]) == ("max-unavailable", None)
    assert events == [Event("a1", "Normal", "rollout waiting: maxUnavailable 1 reached: a1 (in progress)")]


def test_max_unavailable_zero_names_the_nodes_it_keeps_waiting() -> None:
    nodes = [node("b1", DONE, zone="b", unschedulable=True), node("b2", REQ, zone="b"), node("b3", REQ, zone="b")]
    status, events = wait_for(nodes, policy(maxUnavailable="0%"))
    expected = (
        "maxUnavailable 0: only nodes already unavailable (cordoned or NotReady) start; b2, b3 are available and "
        "wait; raise maxUnavailable; see runbooks/rollout-halted.md"
    )
    assert status["message"] == expected
    assert status["waiting_on"]["reason"] == "max-unavailable-zero"
    assert status["waiting_on"]["nodes"] == [{"node": "b2", "why": "available"}, {"node": "b3", "why": "available"}]
    assert events == [Event("b2", "Warning", f"rollout waiting: {expected}")]


def test_max_parallel_upgrades_full_names_the_nodes_in_progress() -> None:
    nodes = [
        node("a1", S.POD_DELETION_REQUIRED, zone="a"),
        node("a2", S.CORDON_REQUIRED, zone="a"),
        node("a3", REQ, zone="a"),
    ]
    status, events = wait_for(nodes, policy(maxParallelUpgrades=2, maxUnavailable="100%"))
    expected = "maxParallelUpgrades 2 reached: a1 (in progress), a2 (in progress)"
    assert status["message"] == expected
    assert status["waiting_on"] == {
        "reason": "max-parallel-upgrades",
        "domain": "a",
        "nodes": [{"node": "a1", "why": "in progress"}, {"node": "a2", "why": "in progress"}],
        "count": 2,
        "next": "a3",
        "until": None,
        "runbook": None,
    }
    assert events == [Event("a1", "Normal", f"rollout waiting: {expected}")]


def test_a_soak_says_until_when_and_what_starts_then() -> None:
    nodes = [node("a1", DONE, zone="a", since=0), node("b1", REQ, zone="b")]
    status, events = wait_for(nodes, policy(failureDomains={"soakSeconds": 300}), now=T0 + 120)
    expected = f"soaking domain a for 180s more (failureDomains.soakSeconds 300, until {at(300)}); then domain b starts"
    assert status["message"] == expected
    assert status["waiting_on"] == {
        "reason": "soak", "domain": "b", "nodes": [], "count": 0, "next": "b1", "until": at(300), "runbook": None,
        "stage": "a", "finished_at": at(0),  # what `upgrader promote` ends the soak of
    }
    assert events == [Event("b1", "Normal", f"rollout waiting: {expected}")]
    # The seconds left change every pass; what it waits on does not, so no Event again.
    later, again = wait_for(nodes, policy(failureDomains={"soakSeconds": 300}), now=T0 + 200,
                            previous=status)
    assert later["message"].startswith("soaking domain a for 100s more") and again == []


def test_the_next_domain_waits_for_the_previous_one_to_finish() -> None:
    nodes = [
        node("a1", DONE, zone="a"),
        node("b1", DONE, zone="b"),
        node("b2", S.UNCORDON_REQUIRED, zone="b"),
        node("c1", REQ, zone="c"),
        node("c2", REQ, zone="c", unschedulable=True),
    ]
    status, events = wait_for(nodes, policy(maxUnavailable="100%"))
    expected = "domain c waits for domain b to finish: b2 (in progress)"
    assert status["message"] == expected
    assert status["waiting_on"]["reason"] == "previous-domain"
    assert (status["waiting_on"]["domain"], status["waiting_on"]["next"]) == ("b", "c2")  # the free start first
    assert events == [Event("b2", "Normal", f"rollout waiting: {expected}")]


def test_nodes_in_progress_in_another_domain_are_named() -> None:
    nodes = [node("a1", REQ, zone="a"), node("b1", S.DRAIN_REQUIRED, zone="b"), node("b2", REQ, zone="b")]
    status, events = wait_for(nodes, policy(maxParallelUpgrades=0, maxUnavailable="100%"),
                              previous={"phase": "Running", "message": "rolling", "current_domain": "a"})
    expected = (
        "nodes of domain b are in progress while the rollout is on domain a (the order, a zone label or the fleet "
        "changed mid-rollout): no node starts until they finish; in progress: b1"
    )
    assert status["message"] == expected
    assert (status["waiting_on"]["reason"], status["waiting_on"]["next"]) == ("other-domain", "a1")
    assert events == [Event("b1", "Normal", f"rollout waiting: {expected}")]


def test_a_long_list_is_cut_in_the_message_and_counted_in_the_field() -> None:
    held = [node(f"z{i:02}", REQ, zone="z", unschedulable=True) for i in range(12)]
    status, _ = wait_for([node("a1", REQ, zone="a"), *held], policy(maxUnavailable=12))
    assert status["message"] == (
        "maxUnavailable 12 reached: "
        + ", ".join(f"z{i:02} (cordoned, not by upgrader)" for i in range(10))
        + ", and 2 more; uncordon them or raise maxUnavailable; see runbooks/rollout-halted.md"
    )
    assert (len(status["waiting_on"]["nodes"]), status["waiting_on"]["count"]) == (12, 12)


def test_mixed_holders_name_the_nodes_each_step_is_for() -> None:
    nodes = [node("a1", S.CORDON_REQUIRED, zone="a"), node("a2", REQ, zone="a"), node("b1", REQ, zone="b",
                                                                                        unschedulable=True)]
    status, _ = wait_for(nodes, policy(maxParallelUpgrades=2, maxUnavailable=2))
    assert status["message"] == (
        "maxUnavailable 2 reached: b1 (cordoned, not by upgrader), a1 (in progress); uncordon b1 or raise "
        "maxUnavailable; see runbooks/rollout-halted.md"
    )


def test_the_same_wait_makes_no_second_event_and_another_one_does() -> None:
    status, _ = wait_for(readme_fleet(), Policy())
    same, events = wait_for(readme_fleet(), Policy(), previous=status)
    assert (same["message"], events) == (README_WAIT, [])
    # gpu-c-01 uncordoned but another node cordoned instead: another wait, another Event.
    fleet_now = [n for n in readme_fleet() if n.name not in ("gpu-c-01", "gpu-b-02")]
    fleet_now += [node("gpu-c-01", REQ, zone="us-east-1c"), node("gpu-b-02", REQ, zone="us-east-1b",
                                                                 unschedulable=True)]
    _, events = wait_for(fleet_now, Policy(), previous=status)
    assert [e.message for e in events] == [
        "rollout waiting: maxUnavailable 2 reached: gpu-a-01 (cordoned, not by upgrader), gpu-b-02 (cordoned, "
        "not by upgrader); uncordon them or raise maxUnavailable; see runbooks/rollout-halted.md"
    ]


def test_paused_or_finished_waits_on_nothing() -> None:
    status, events = wait_for(readme_fleet(), Policy(), paused=True)
    assert (status["phase"], status["waiting_on"], events) == ("Paused", None, [])
    status, events = wait_for([node("a1", DONE, zone="a"), node("b1", DONE, zone="b")], Policy())
    assert (status["phase"], status["waiting_on"], events) == ("Done", None, [])


def test_a_pass_writes_the_wait_to_the_status_and_one_event_only_when_it_changes() -> None:
    nodes = readme_fleet()
    pods = [driver_pod(n.name, revision=NEW if n.state is DONE else OLD) for n in nodes]
    written: list[Any] = []

    def apply(actions: list[Any]) -> list[Outcome]:
        written.extend(actions)
        return [Outcome(a, Result.OK) for a in actions]

    first = reconcile(snapshot(nodes, pods), Policy(), T0, apply)
    assert first.status.message == README_WAIT and first.started == []
    assert [a for a in written if isinstance(a, Event)] == [
        Event("gpu-a-01", "Warning", f"rollout waiting: {README_WAIT}")
    ]
    assert [to_dict(a.status)["waiting_on"]["reason"] for a in written if isinstance(a, WriteStatus)] == [
        "max-unavailable"
    ]
    written.clear()
    second = reconcile(snapshot(nodes, pods, control=Control(previous=first.status)), Policy(), T0 + 10, apply)
    assert second.status.message == README_WAIT
    assert [a for a in written if isinstance(a, Event)] == []
