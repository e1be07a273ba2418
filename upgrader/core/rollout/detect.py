"""What a pass notices before it steps nodes, for the nodes nobody is working on and for those it
did not start itself.

- New nodes get their first label; idle nodes move between upgrade-done and upgrade-required as
  their driver falls behind or catches up. A node with the skip label is labelled like any other
  (out of date: `upgrade-required`, as in the GPU Operator) but never started.
- A failed node whose driver pod came up Running and Ready at the newest revision after it failed
  goes back to validation (the fix was made: a pushed image, a deleted pod, a fixed DaemonSet);
  after a failed validation, only a driver pod other than the one it failed with counts. A skipped
  failed node is left to the person repairing it.
- A node in progress that upgrader did not start (no `gpu-upgrader.io/started-at`: the GPU
  Operator's upgrade controller started it before the hand-over) is adopted: its timers come from
  the Operator's own annotations where it kept them, and a cordon the Operator recorded as
  someone else's stays.
"""

from __future__ import annotations

from dataclasses import dataclass

from upgrader.core.fleet.managed import fleet
from upgrader.core.fleet.preflight import clear_held
from upgrader.core.model.actions import Action, Annotate, Event, SetUnschedulable, Transition
from upgrader.core.model.states import (
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    IN_PROGRESS,
    OPERATOR_VALIDATION_START,
    OPERATOR_WAIT_START,
    SINCE_STATE,
    STARTED_AT,
    STATE_SINCE,
    TARGET_REVISION,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.model.timefmt import rfc3339
from upgrader.core.model.views import NodeView, PodView, Snapshot
from upgrader.core.node.context import context
from upgrader.core.node.cordon import OURS, cordon_record, forget_lifted_cordon, record_outlived
from upgrader.core.node.facts import NodeFacts, derived, driver_known, facts_of, unfinished_cycle, upgrade_reason
from upgrader.core.node.machine import fire
from upgrader.core.node.steps import FUTURE_TOLERANCE, lost_clock
from upgrader.core.policy.policy import Policy
from upgrader.core.report.kinds import FailureKind
from upgrader.core.rollout.stepping import CLEAR_BLOCK, clear_if_blocked, restart_clock

# The Operator's start time of the wait a state is in, for states where it keeps one.
OPERATOR_CLOCKS = {
    State.WAIT_FOR_JOBS_REQUIRED: OPERATOR_WAIT_START,
    State.VALIDATION_REQUIRED: OPERATOR_VALIDATION_START,
}


# What a managed node with no state label gets labelled: behind, or current.
FIRST_LABELS = (State.UPGRADE_REQUIRED, State.DONE)


def detect(snapshot: Snapshot, policy: Policy, now: float) -> list[Action]:
    """Label new nodes, move idle nodes between upgrade-done and upgrade-required, recover failed
    nodes whose driver came back, and adopt nodes in progress that someone else started."""
    actions: list[Action] = []
    stamp = {STATE_SINCE: rfc3339(now)}
    split = fleet(snapshot)
    skipped = [snapshot.nodes[name] for name in split.skipped if not snapshot.nodes[name].invalid]
    # A recovered node is in progress again: it waits for a maxParallelUpgrades slot like a start
    # (it is unavailable already, so maxUnavailable does not change).
    slots = policy.max_parallel_upgrades - sum(1 for n in split.managed if n.state in IN_PROGRESS)
    for node in _to_judge(snapshot, split.managed, skipped, now):
        free = policy.max_parallel_upgrades == 0 or slots > 0
        if node.state in IN_PROGRESS:
            actions.extend(adopt(snapshot, node, policy, now))
            continue
        if node.state is State.FAILED:
            actions.extend(record_failure(node, now))
            # A skipped failed node is being repaired by hand: it is not validated and uncordoned.
            recovered = recover(snapshot, node, policy, now) if node.name not in split.skipped and free else []
            slots -= sum(1 for a in recovered if isinstance(a, Transition))
            if not any(isinstance(a, SetUnschedulable) for a in recovered):  # that cordon is ours, recorded anew
                actions.extend(forget_lifted_cordon(node))
            actions.extend(recovered)
            continue
        actions.extend(forget_lifted_cordon(node))
        reason = upgrade_reason(snapshot, node)
        if reason is None and not driver_known(snapshot, node):
            continue  # no live driver pod of a known DaemonSet: neither current nor behind, so unchanged
        # A block left over from a hand relabel goes with the move (a node not in progress has none).
        marks = {**stamp, **clear_if_blocked(node), **clear_held(node)}
        if node.state is None:
            target = State.UPGRADE_REQUIRED if reason else State.DONE
            actions.append(Transition(node.name, None, target, marks, reason or "driver is current"))
        elif node.state is State.DONE and reason:
            actions.append(fire(node.name, node.state, "require", annotations=marks, message=reason))
        elif node.state is State.DONE and unfinished_cycle(node) and node.name not in split.skipped:
            if free:  # like a start: it waits for a maxParallelUpgrades slot
                slots -= 1
                actions.append(unfinished(node, now))
        elif node.state is State.UPGRADE_REQUIRED and not reason:
            actions.append(fire(node.name, node.state, "up_to_date", annotations=marks, message="driver is current"))
        elif lost_clock(node, now):
            actions.extend(restart_clock(node, str(lost_clock(node, now)), now))  # the soak counts from it
        elif clear_if_blocked(node):
            actions.append(Annotate(node.name, CLEAR_BLOCK))  # left over from a hand relabel
    return actions


def _to_judge(snapshot: Snapshot, managed: list[NodeView], skipped: list[NodeView], now: float) -> list[NodeView]:
    """The nodes detect must judge the long way, in name order: all but the quiet ones. Which are
    quiet is kept from pass to pass while no node changes (core/node/facts.py); only a clock in our
    future makes the time matter, and then each quiet node's clock is judged at `now`."""
    nodes = [*managed, *skipped]
    known = derived(
        snapshot, "detect", lambda: _partition(snapshot, nodes, None, None), lambda old, moved: _partition(
            snapshot, nodes, old, moved)
    )
    latest = max(known.since.values(), default=None)
    if latest is None or latest - now <= FUTURE_TOLERANCE:
        return [snapshot.nodes[name] for name in known.loud]
    facts = facts_of(snapshot)
    return [n for n in sorted(nodes, key=_name) if not _quiet(facts[n.name], now)]


@dataclass(frozen=True)
class _Partition:
    loud: list[str]  # the nodes that are not quiet at any time, by name
    since: dict[str, float]  # the quiet ones' clocks


def _partition(snapshot: Snapshot, nodes: list[NodeView], old: _Partition | None, moved: set[str] | None) -> _Partition:
    """Which nodes are loud, and the quiet ones' clocks: worked out again only for the nodes that
    `moved` since `old` (every node without)."""
    facts = facts_of(snapshot)
    if old is None or moved is None:
        loud, since, judged = [], {}, [n.name for n in nodes]
    else:
        loud = [name for name in old.loud if name not in moved]
        since = dict(old.since)  # copied in C; the moved nodes' clocks go, then come back if still quiet
        for name in moved:
            since.pop(name, None)
        present = {n.name for n in nodes}
        judged = [name for name in moved if name in present]
    for name in judged:
        fact = facts[name]
        if not _quiet(fact, None):
            loud.append(name)
        elif fact.since is not None:
            since[name] = fact.since
    return _Partition(sorted(loud), since)


def _name(node: NodeView) -> str:
    return node.name


def _quiet(facts: NodeFacts, now: float | None) -> bool:
    """A node detect leaves as it is, told from its facts alone: waiting at upgrade-required with
    its driver behind, or upgrade-done and current with nothing of an upgrade left on it; its clock
    good (at `now`; None: leaving a clock in our future aside) and no block record left over. Most
    of a large fleet, every pass (the rest goes the long way)."""
    node = facts.node
    if facts.blocked or facts.clock is not None or (now is not None and facts.clock_lost(now)):
        return False
    if record_outlived(node):
        return False
    if node.state is State.UPGRADE_REQUIRED:
        return facts.reason is not None
    return node.state is State.DONE and facts.reason is None and facts.unfinished is None


def ready_at_newest(snapshot: Snapshot, node: NodeView, policy: Policy) -> PodView | None:
    """The node's driver pod that is Running and Ready at its DaemonSet's newest revision, if any."""
    ctx = context(snapshot, node.name, policy)
    target = ctx.target_hash
    if target is None:
        return None
    return next(
        (
            p
            for p in ctx.driver_pods
            if not p.terminating and p.phase == "Running" and p.ready and p.revision_hash == target
        ),
        None,
    )


def recover(snapshot: Snapshot, node: NodeView, policy: Policy, now: float) -> list[Action]:
    """A failed node goes back to validation once its driver pod is Running and Ready at the newest
    revision: any such pod after a failure elsewhere (the image was published, the crash fixed), only
    another pod than the one it failed with after a failed validation (its driver changed)."""
    pod = ready_at_newest(snapshot, node, policy)
    failed_validation = node.annotations.get(FAILED_STATE) == State.VALIDATION_REQUIRED.value
    if pod is None or (failed_validation and pod.uid == node.annotations.get(FAILED_DRIVER_POD)):
        return []
    if not node.unschedulable:
        # Someone uncordoned the failed node: validation happens cordoned, like every state up to the
        # uncordon, so the cordon goes back first, recorded as upgrader's in the same request; the node
        # moves on at the next pass, once cordoned (a cordon refused as stale leaves it failed, not validating).
        return [SetUnschedulable(node.name, True, OURS)]
    # A node the GPU Operator (or a person) left failed is upgrader's from here: not adopted on the
    # next pass, its cordon lifted at the end only where a record says whose it is.
    record, cordon = cordon_record(node)
    annotations: dict[str, str | None] = {
        STARTED_AT: node.annotations.get(STARTED_AT) or rfc3339(now),
        WAS_UNSCHEDULABLE: record,
        STATE_SINCE: rfc3339(now),
        TARGET_REVISION: pod.revision_hash,
        FAILED_AT: None,
        FAILED_KIND: None,
        FAILED_STATE: None,
        FAILED_REASON: None,
        FAILED_DRIVER_POD: None,
        **CLEAR_BLOCK,
    }
    failure = node.annotations.get(FAILED_REASON)
    message = (
        f"driver pod {pod.key} is Running and Ready at revision {pod.revision_hash}"
        + (f" since the node failed ({failure})" if failure else "")
        + "; validating the node again"
        + ("" if record else f"; {cordon}")
    )
    return [fire(node.name, State.FAILED, "driver_recovered", annotations=annotations, message=message)]


def record_failure(node: NodeView, now: float) -> list[Action]:
    """A failed node without upgrader's record (labelled by hand, or by another controller) gets one
    now, so it halts the rollout and waits for an acknowledgement like any failure, never taken for
    one acknowledged before it happened."""
    if node.annotations.get(FAILED_AT):
        return []
    reason = "labelled upgrade-failed with no failure recorded (by hand, or by another controller)"
    marks: dict[str, str | None] = {FAILED_AT: rfc3339(now), FAILED_KIND: "failed", FAILED_REASON: reason}
    return [Annotate(node.name, marks), Event(node.name, "Warning", f"{reason}; see {FailureKind.FAILED.runbook}")]


def unfinished(node: NodeView, now: float) -> Transition:
    """`upgrade-done` set by hand on a node upgrader had started and not finished: its driver is
    current, but nobody validated it and upgrader's cordon is still on, so it is validated, then
    uncordoned, as if it had got there itself."""
    return fire(
        node.name,
        State.DONE,
        "unfinished",
        annotations={STATE_SINCE: rfc3339(now), **CLEAR_BLOCK},
        message=(
            f"labelled upgrade-done before its upgrade ended ({unfinished_cycle(node)} is still set): validating "
            "the node, then uncordoning it"
        ),
    )


def operator_time(value: str | None) -> float | None:
    """The GPU Operator's timestamps: Unix seconds as a decimal string; None for anything else
    (milliseconds, other digits, the far future), so a bad mark is ignored, never fatal."""
    text = (value or "").strip()
    if not text or not text.isascii() or not text.isdecimal() or len(text) > 10:
        return None
    return float(int(text))


# States a node can be taken over in before anything disrupted it: not cordoned, nothing evicted.
UNTOUCHED = (State.CORDON_REQUIRED, State.WAIT_FOR_JOBS_REQUIRED)


def adopt(snapshot: Snapshot, node: NodeView, policy: Policy, now: float) -> list[Action]:
    """Take over a node in progress that upgrader did not start (the GPU Operator did). One not cordoned
    yet goes back to upgrade-required: it starts in its turn, within maxParallelUpgrades, maxUnavailable
    and the domain order, never all at once because another controller put them in progress."""
    if node.annotations.get(STARTED_AT) or node.state is None:
        return []
    if node.state in UNTOUCHED and not node.unschedulable:
        message = (
            f"put in {node.state.value} by another controller and not cordoned yet: back to upgrade-required, to "
            "start in its turn within maxParallelUpgrades, maxUnavailable and the domain order"
        )
        marks: dict[str, str | None] = {STATE_SINCE: rfc3339(now), **clear_if_blocked(node)}
        return [fire(node.name, node.state, "requeue", annotations=marks, message=message)]
    clock_key = OPERATOR_CLOCKS.get(node.state)
    operator_since = operator_time(node.annotations.get(clock_key)) if clock_key else None
    # A state-since on a node upgrader did not start is from an earlier life of the node: not this wait's.
    # The Operator stamped it by its own clock: one ahead of ours counts from now, never from the future.
    since = min(operator_since, now) if operator_since else now
    record, cordon = cordon_record(node)
    annotations: dict[str, str | None] = {
        STARTED_AT: rfc3339(now),
        STATE_SINCE: rfc3339(since),
        SINCE_STATE: node.state.value,
        WAS_UNSCHEDULABLE: record,
    }
    target = context(snapshot, node.name, policy).target_hash
    if target and not node.annotations.get(TARGET_REVISION):
        annotations[TARGET_REVISION] = target
    clock = f"its {clock_key} timer ({rfc3339(since)})" if operator_since else f"now ({rfc3339(since)})"
    message = f"adopted in {node.state.value} (started by another controller); its wait counts from {clock}; {cordon}"
    return [Annotate(node.name, annotations), Event(node.name, "Normal", message)]
