"""When the world misbehaves (issue 11): hand edits, a changed policy, lost records, API errors,
pods that come back. The core's decisions, judged by the actions and the words a user sees."""

from __future__ import annotations

from typing import Any

from upgrader.core.model.actions import Annotate, Event, Evict, Outcome, Result, SetUnschedulable, Transition
from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    DRIVER_POD_UID,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OUR_CORDON,
    SINCE_STATE,
    STARTED_AT,
    STATE_LABEL,
    STATE_SINCE,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.model.views import NodeView
from upgrader.core.rollout.detect import detect
from upgrader.core.rollout.starts import start_nodes
from upgrader.core.rollout.stepping import conclude, node_steps

from .factories import (
    NEW,
    T0,
    at,
    conclude_step,
    driver_pod,
    gpu_pod,
    node,
    policy,
    run_step,
    snapshot,
    step,
    transition,
)

S = State


def test_a_node_someone_uncordoned_mid_upgrade_is_cordoned_again_and_the_cordon_is_ours() -> None:
    marks = {STARTED_AT: at(0), WAS_UNSCHEDULABLE: "true", OPERATOR_INITIAL_UNSCHEDULABLE: "true"}
    view = node(state=S.POD_DELETION_REQUIRED, since=0, unschedulable=False, annotations=marks)
    ((_, plan),) = node_steps(snapshot([view], [driver_pod(), gpu_pod("train-0")]), policy())
    # The record in the cordon's own request (found by the property search: a crash between two writes
    # must leave our cordon recorded as ours, not as the admin's).
    assert plan.attempts[:2] == [
        SetUnschedulable(
            "n1", True, {WAS_UNSCHEDULABLE: "false", OPERATOR_INITIAL_UNSCHEDULABLE: None, OUR_CORDON: "true"}
        ),
        Event(
            "n1",
            "Warning",
            "cordoned again: someone uncordoned the node in pod-deletion-required, before its upgrade ended",
        ),
    ]
    assert isinstance(plan.attempts[2], Evict)


def test_the_driver_is_never_deleted_in_the_pass_that_puts_the_cordon_back() -> None:
    """Found by the two-replica campaign: the cordon put back was refused as stale, the same pass deleted
    the driver pod on the schedulable node, under a job pod that had landed meanwhile."""
    marks = {STARTED_AT: at(0), WAS_UNSCHEDULABLE: "false", DRIVER_POD_UID: "driver-old"}
    view = node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=False, annotations=marks)
    ((_, plan),) = node_steps(snapshot([view], [driver_pod(uid="driver-old")]), policy())
    assert [type(a).__name__ for a in plan.attempts] == ["SetUnschedulable", "Event"]
    assert plan.stamp_on_success is None and plan.trigger is None


def test_a_retry_of_a_node_someone_uncordoned_meanwhile_records_the_new_cordon_as_ours() -> None:
    """Found by the property search: a node an admin had cordoned failed, was relabelled for a retry and
    uncordoned by the admin; the retry's cordon is upgrader's and must be lifted at the end."""
    failed_before = node(zone="a", unschedulable=False, annotations={WAS_UNSCHEDULABLE: "true"})
    _, actions = start_nodes(snapshot([failed_before], [driver_pod()]), policy(), T0, True, set())
    assert transition(actions).annotations[WAS_UNSCHEDULABLE] == "false"


def test_an_unreadable_label_never_frees_the_budget() -> None:
    """maxUnavailable 1; a node upgrader cordoned was relabelled `bogus`: it still holds the budget."""
    bogus = node("n0", state=None, unschedulable=True, invalid="label: unknown upgrade state 'bogus'")
    bogus = NodeView(**{**bogus.__dict__, "labels": {**bogus.labels, STATE_LABEL: "bogus"}})
    fresh = node("n1", zone="a")
    snap = snapshot([bogus, fresh], [driver_pod("n0"), driver_pod("n1")])
    schedule, actions = start_nodes(snap, policy(maxUnavailable=1), T0, True, set())
    waiting = (
        "maxUnavailable 1 reached: n0 (invalid, cordoned, not by upgrader); fix what makes it invalid or raise "
        "maxUnavailable; see runbooks/rollout-halted.md"
    )
    assert schedule.waiting == waiting
    assert actions == [Event("n0", "Warning", f"rollout waiting: {waiting}")]  # nothing starts; it says why


def test_an_eviction_the_api_keeps_failing_has_a_clock_and_a_reason() -> None:
    """Two PDBs over one pod: every eviction is a 500. The wait shows the error, then blocks."""
    view = node(state=S.POD_DELETION_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})
    snap = snapshot([view], [driver_pod(), gpu_pod("train-0")])
    message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    pol = policy(gpuPodDeletion={"timeoutSeconds": 20})
    _, plan = step(snap, pol=pol)
    failing = [Outcome(a, Result.ERROR, message) for a in plan.attempts]
    _, early = conclude_step(snap, pol=pol, now=T0 + 19, outcomes=failing)
    assert early.actions == []
    assert early.waiting == f"eviction of default/train-0 failed: {message}"
    _, late = run_step(snap, pol=pol, now=T0 + 20, outcomes=failing)
    assert isinstance(late[0], Annotate)
    assert late[0].annotations["gpu-upgrader.io/blocked-reason"] == (
        f"eviction of default/train-0 failed: {message} (past the 20s timeout)"
    )


def test_pods_that_keep_coming_back_are_named_and_time_out() -> None:
    view = node(state=S.DRAIN_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})
    pinned = gpu_pod("pinned-7", owner="Job", created=T0 + 40)
    pol = policy(drain={"enable": True, "timeoutSeconds": 60})
    snap = snapshot([view], [driver_pod(), pinned])
    plan, actions = run_step(snap, pol=pol, now=T0 + 45)
    assert actions == []
    assert actions == [] and plan.waiting == (
        "pods of Job default/pinned-7-owner came back to the node after it was cordoned "
        "(created after it entered drain-required): something places them on it directly (nodeName, a "
        "pinned Job, a toleration), so evicting them again does not end"
    )
    _, actions = run_step(snap, pol=pol, now=T0 + 60)
    assert isinstance(actions[0], Annotate) and "came back to the node" in actions[0].annotations[
        "gpu-upgrader.io/blocked-reason"
    ]
    assert not any(isinstance(a, Transition) for a in actions)


def _plan_and_conclude(view: NodeView, pods: list[Any], pol: Any, now: float) -> list[Any]:
    ((ctx, plan),) = node_steps(snapshot([view], pods), pol)
    return conclude(ctx, plan, [Outcome(a, Result.OK) for a in plan.attempts], now).actions


def test_a_state_someone_else_moved_after_upgrader_started_blocks_and_says_the_change() -> None:
    """pod-deletion-required set by hand (or by a second upgrade controller) on a node upgrader had at
    validation-required: upgrader does not go on from a state it did not set (found by the property
    search, it once fell back to a drain at once, 0 s into the deletion; issue 23: it is now a halt)."""
    pol = policy(gpuPodDeletion={"timeoutSeconds": 20}, drain={"enable": True})
    marks = {STARTED_AT: at(-1800), WAS_UNSCHEDULABLE: "false", SINCE_STATE: "validation-required"}
    view = node(state=S.POD_DELETION_REQUIRED, since=-1800, unschedulable=True, annotations=marks)
    actions = _plan_and_conclude(view, [driver_pod(), gpu_pod("train-0")], pol, T0)
    reason = (
        "its state label was moved from validation-required to pod-deletion-required by someone else (upgrader had "
        "set validation-required): set it back (kubectl label node n1 nvidia.com/gpu-driver-upgrade-state="
        "validation-required --overwrite), or let upgrader go on from pod-deletion-required (kubectl annotate node "
        "n1 gpu-upgrader.io/since-state=pod-deletion-required gpu-upgrader.io/state-since- --overwrite)"
    )
    assert actions == [
        Annotate("n1", {BLOCKED_KIND: "state-label", BLOCKED_REASON: reason, BLOCKED_SINCE: at(0)}),
        Event("n1", "Warning", f"blocked in pod-deletion-required since {at(0)}: {reason}; "
              "see runbooks/state-label-moved.md"),
    ]


def test_going_on_from_the_moved_state_starts_its_own_clock_and_says_so() -> None:
    """The second way on: since-state set to the new state and the clock removed."""
    marks = {STARTED_AT: at(-1800), WAS_UNSCHEDULABLE: "false", SINCE_STATE: "pod-deletion-required"}
    view = node(state=S.POD_DELETION_REQUIRED, unschedulable=True, annotations=marks)
    actions = _plan_and_conclude(view, [driver_pod(), gpu_pod("train-0")], policy(), T0)
    assert actions == [
        Annotate("n1", {STATE_SINCE: at(0), SINCE_STATE: "pod-deletion-required"}),
        Event("n1", "Warning", "the clock of pod-deletion-required (gpu-upgrader.io/state-since) was missing or "
              "unreadable: its waits count from now"),
    ]


def test_a_node_in_progress_whose_clock_was_removed_gets_a_new_one() -> None:
    view = node(state=S.WAIT_FOR_JOBS_REQUIRED, unschedulable=True, annotations={STARTED_AT: at(-60)})
    actions = _plan_and_conclude(view, [driver_pod()], policy(), T0)
    assert actions == [
        Annotate("n1", {STATE_SINCE: at(0), SINCE_STATE: "wait-for-jobs-required"}),
        Event("n1", "Warning", "the clock of wait-for-jobs-required (gpu-upgrader.io/state-since) was missing or "
              "unreadable: its waits count from now"),
    ]


def test_a_done_node_whose_clock_was_removed_gets_a_new_one_for_the_soak() -> None:
    """Found by the property search: the soak after a domain counted from 1970 for a node whose
    state-since someone removed, and the next domain started inside soakSeconds."""
    view = node(state=S.DONE, annotations={SINCE_STATE: "upgrade-done"})
    assert detect(snapshot([view], [driver_pod(revision=NEW)]), policy(), T0) == [
        Annotate("n1", {STATE_SINCE: at(0), SINCE_STATE: "upgrade-done"}),
        Event("n1", "Warning", "the clock of upgrade-done (gpu-upgrader.io/state-since) was missing or unreadable: "
              "its waits count from now"),
    ]


def test_a_clock_stamped_in_this_controllers_future_restarts_from_now() -> None:
    """Another replica, its clock 10 minutes ahead, stamped the state: this replica's waits would count
    from a moment it has not reached. The clock restarts from now, and the node says why."""
    marks = {STARTED_AT: at(0), WAS_UNSCHEDULABLE: "false", SINCE_STATE: "wait-for-jobs-required"}
    view = node(state=S.WAIT_FOR_JOBS_REQUIRED, since=600, unschedulable=True, annotations=marks)
    ((ctx, plan),) = node_steps(snapshot([view], [driver_pod()]), policy(), T0)
    actions = conclude(ctx, plan, [], T0).actions
    assert actions == [
        Annotate("n1", {STATE_SINCE: at(0), SINCE_STATE: "wait-for-jobs-required"}),
        Event("n1", "Warning", f"the clock of wait-for-jobs-required ({STATE_SINCE} {at(600)}) is 600s in this "
              "controller's future (stamped by a replica whose clock runs ahead?): its waits count from now"),
    ]


def test_a_clock_a_moment_ahead_is_kept() -> None:
    marks = {STARTED_AT: at(0), WAS_UNSCHEDULABLE: "false", SINCE_STATE: "wait-for-jobs-required"}
    view = node(state=S.WAIT_FOR_JOBS_REQUIRED, since=3, unschedulable=True, annotations=marks)
    ((_, plan),) = node_steps(snapshot([view], [driver_pod()]), policy(), T0)
    assert plan.clock_lost is None


def test_an_operator_timer_from_the_future_counts_from_now_on_adoption() -> None:
    """The GPU Operator stamps its wait in Unix seconds by its own clock: one ahead of ours is not
    honoured as a wait that has not begun yet."""
    from upgrader.core.model.states import OPERATOR_WAIT_START

    view = node(state=S.WAIT_FOR_JOBS_REQUIRED, unschedulable=True,
                annotations={OPERATOR_WAIT_START: str(int(T0) + 3600)})
    annotate = next(a for a in detect(snapshot([view], [driver_pod()]), policy(), T0) if isinstance(a, Annotate))
    assert annotate.annotations[STATE_SINCE] == at(0)
