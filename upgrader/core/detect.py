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

from upgrader.core.actions import Action, Annotate, Event, Transition
from upgrader.core.machine import fire
from upgrader.core.node_context import context
from upgrader.core.policy import Policy
from upgrader.core.rollout import CLEAR_BLOCK, clear_if_blocked, fleet
from upgrader.core.states import (
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    IN_PROGRESS,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OPERATOR_VALIDATION_START,
    OPERATOR_WAIT_START,
    REQUESTED_ANNOTATION,
    STARTED_AT,
    STATE_SINCE,
    TARGET_REVISION,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.timefmt import rfc3339
from upgrader.core.views import NodeView, PodView, Snapshot

# The Operator's start time of the wait a state is in, for states where it keeps one.
OPERATOR_CLOCKS = {
    State.WAIT_FOR_JOBS_REQUIRED: OPERATOR_WAIT_START,
    State.VALIDATION_REQUIRED: OPERATOR_VALIDATION_START,
}


def upgrade_reason(snapshot: Snapshot, node: NodeView) -> str | None:
    """Why the node needs an upgrade, or None when its driver is current."""
    if node.annotations.get(REQUESTED_ANNOTATION) == "true":
        return f"annotation {REQUESTED_ANNOTATION}=true"
    if node.state is State.UPGRADE_REQUIRED and node.annotations.get(FAILED_AT):
        # Relabelled after a failure: its driver pod may well be "current" and still broken.
        return f"retrying after upgrade-failed: {node.annotations.get(FAILED_REASON, '(no reason recorded)')}"
    for pod in snapshot.driver_pods.get(node.name, []):
        if pod.terminating:
            continue
        ds = snapshot.driver_set_of(pod)
        if ds is not None and ds.newest_hash and pod.revision_hash != ds.newest_hash:
            return (
                f"driver pod {pod.key} at revision {pod.revision_hash}, "
                f"DaemonSet {ds.name} at {ds.newest_hash} (revision {ds.newest_revision})"
            )
    return None


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
    for node in sorted([*split.managed, *skipped], key=lambda n: n.name):
        if node.state is State.FAILED:
            # A skipped failed node is being repaired by hand: it is not validated and uncordoned.
            if node.name not in split.skipped and (policy.max_parallel_upgrades == 0 or slots > 0):
                recovered = recover(snapshot, node, policy, now)
                slots -= len(recovered)
                actions.extend(recovered)
            continue
        if node.state in IN_PROGRESS:
            actions.extend(adopt(snapshot, node, policy, now))
            continue
        reason = upgrade_reason(snapshot, node)
        if node.state is None:
            target = State.UPGRADE_REQUIRED if reason else State.DONE
            actions.append(Transition(node.name, None, target, stamp, reason or "driver is current"))
        elif node.state is State.DONE and reason:
            actions.append(fire(node.name, node.state, "require", annotations=stamp, message=reason))
        elif node.state is State.UPGRADE_REQUIRED and not reason:
            actions.append(fire(node.name, node.state, "up_to_date", annotations=stamp, message="driver is current"))
        elif clear_if_blocked(node):
            actions.append(Annotate(node.name, CLEAR_BLOCK))  # left over from a hand relabel
    return actions


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
    annotations: dict[str, str | None] = {
        # A node the GPU Operator left failed is upgrader's from here: not adopted on the next pass,
        # its cordon the Operator's (lifted at the end) unless the Operator recorded someone else's.
        STARTED_AT: node.annotations.get(STARTED_AT) or rfc3339(now),
        WAS_UNSCHEDULABLE: node.annotations.get(WAS_UNSCHEDULABLE)
        or ("true" if OPERATOR_INITIAL_UNSCHEDULABLE in node.annotations else "false"),
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
    )
    return [fire(node.name, State.FAILED, "driver_recovered", annotations=annotations, message=message)]


def operator_time(value: str | None) -> float | None:
    """The GPU Operator's timestamps: Unix seconds as a decimal string; None for anything else
    (milliseconds, other digits, the far future), so a bad mark is ignored, never fatal."""
    text = (value or "").strip()
    if not text or not text.isascii() or not text.isdecimal() or len(text) > 10:
        return None
    return float(int(text))


def adopt(snapshot: Snapshot, node: NodeView, policy: Policy, now: float) -> list[Action]:
    """Take over a node in progress that upgrader did not start (the GPU Operator did)."""
    if node.annotations.get(STARTED_AT) or node.state is None:
        return []
    clock_key = OPERATOR_CLOCKS.get(node.state)
    operator_since = operator_time(node.annotations.get(clock_key)) if clock_key else None
    # A state-since on a node upgrader did not start is from an earlier life of the node: not this wait's.
    since = operator_since or now
    foreign = node.annotations.get(WAS_UNSCHEDULABLE) == "true" or OPERATOR_INITIAL_UNSCHEDULABLE in node.annotations
    annotations: dict[str, str | None] = {
        STARTED_AT: rfc3339(now),
        STATE_SINCE: rfc3339(since),
        WAS_UNSCHEDULABLE: "true" if foreign else "false",
    }
    target = context(snapshot, node.name, policy).target_hash
    if target and not node.annotations.get(TARGET_REVISION):
        annotations[TARGET_REVISION] = target
    clock = f"its {clock_key} timer ({rfc3339(since)})" if operator_since else f"now ({rfc3339(since)})"
    cordon = (
        f"{OPERATOR_INITIAL_UNSCHEDULABLE} says someone else cordoned it: it stays cordoned at the end"
        if foreign
        else "it is uncordoned at the end"
    )
    message = f"adopted in {node.state.value} (started by another controller); its wait counts from {clock}; {cordon}"
    return [Annotate(node.name, annotations), Event(node.name, "Normal", message)]
