"""Each node in progress, one pass: its step planned (`node_steps`), then, once its attempts are
applied, concluded (`conclude`) into its transition, block or failure and what it waits on; `project`
folds what landed into the snapshot. rollout/reconcile.py calls them in that order; detection is in
detect.py, new starts in starts.py. Pure: `now` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from upgrader.core.fleet.managed import fleet
from upgrader.core.model.actions import (
    Action,
    Annotate,
    DeletePod,
    Event,
    Evict,
    Outcome,
    Result,
    SetLabels,
    SetTaints,
    SetUnschedulable,
    Transition,
)
from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    FINISHED_OPERATOR_KEYS,
    IN_PROGRESS,
    OPERATOR_TIMERS,
    PER_UPGRADE,
    REQUESTED_ANNOTATION,
    SINCE_STATE,
    STARTED_AT,
    STATE_LABEL,
    STATE_SINCE,
    State,
)
from upgrader.core.model.timefmt import parse_or_none, rfc3339
from upgrader.core.model.views import FOLDED, Folded, NodeView, Snapshot
from upgrader.core.node.context import NodeContext, context
from upgrader.core.node.cordon import keep_cordoned
from upgrader.core.node.machine import fire
from upgrader.core.node.step import Blocked, Step
from upgrader.core.node.steps import STEPS, clock_set_by_hand, entry_annotations
from upgrader.core.policy.policy import OnBlockedTimeout, Policy
from upgrader.core.report.entries import NodeWaiting
from upgrader.core.report.kinds import BlockKind, FailureKind

CLEAR_BLOCK: dict[str, str | None] = {BLOCKED_KIND: None, BLOCKED_REASON: None, BLOCKED_SINCE: None}


def node_steps(snapshot: Snapshot, policy: Policy, now: float | None = None) -> list[tuple[NodeContext, Step]]:
    out = []
    for node in fleet(snapshot).managed:
        if node.state in IN_PROGRESS:
            ctx = context(snapshot, node.name, policy)
            gate = moved_by_someone_else(ctx) or clock_set_by_hand(ctx, now) or no_driver_set(ctx)
            step = gate or STEPS[node.state](ctx)
            out.append((ctx, keep_cordoned(ctx, step)))
    return out


def moved_by_someone_else(ctx: NodeContext) -> Step | None:
    """A node upgrader started (or took over) whose state label someone else moved from one state in
    progress to another: another writer drives it (a second upgrade controller, a hand edit). upgrader
    does not go on from a state it did not set: the node blocks, which halts the rollout, naming the
    change and the two ways on (docs/policy.md#waiting-blocked-failed-halted)."""
    node = ctx.node
    was = node.annotations.get(SINCE_STATE)
    if node.state is None or not node.annotations.get(STARTED_AT) or was in (None, node.state.value):
        return None
    if was not in {s.value for s in IN_PROGRESS}:
        return None  # a clock for an idle state: the node was taken up again, not moved mid-way
    name, now_state = node.name, node.state.value
    return Step(
        name,
        blocked=Blocked(
            BlockKind.STATE_LABEL,
            f"its state label was moved from {was} to {now_state} by someone else (upgrader had set {was}): "
            f"set it back (kubectl label node {name} {STATE_LABEL}={was} --overwrite), or let upgrader go on "
            f"from {now_state} (kubectl annotate node {name} {SINCE_STATE}={now_state} {STATE_SINCE}- --overwrite)",
        ),
    )


def no_driver_set(ctx: NodeContext) -> Step | None:
    """A node in progress that no driver DaemonSet selects any more (deleted, or its selector
    changed): its driver can be neither restarted nor validated, so it stops here, and says so. Only
    its uncordon may still finish, which gives the node back."""
    if ctx.driver_set is not None or ctx.node.state is State.UNCORDON_REQUIRED:
        return None
    return Step(
        ctx.node.name,
        blocked=Blocked(
            BlockKind.DRIVER_DAEMONSET,
            "no driver DaemonSet selects the node any more (deleted, or its node selector changed): its driver "
            "can be neither restarted nor validated; restore the DaemonSet",
        ),
    )


@dataclass(frozen=True)
class Conclusion:
    """What a step and the outcome of its attempts come to: the actions to apply (the node's
    transition, block or failure and their Events), and what the node waits on, if anything."""

    actions: list[Action] = field(default_factory=list)
    waiting: str | None = None


def conclude(
    ctx: NodeContext, step: Step, outcomes: Sequence[Outcome], now: float, disrupted: frozenset[str] = frozenset()
) -> Conclusion:
    """Turn a step and what came of its attempts into the node's transition, block or failure.

    `disrupted`: PodDisruptionBudgets this pass already spent evicting from other nodes.
    """
    node = ctx.node
    assert node.state is not None
    if step.clock_lost is not None:
        return Conclusion(restart_clock(node, step.clock_lost, now))
    refused, spent = _refusals(step, outcomes, disrupted)
    waiting = _waiting(step, outcomes, spent)
    entered = parse_or_none(node.annotations.get(step.clock)) or now
    timed_out = step.timeout > 0 and now - entered >= step.timeout
    blocked = step.blocked or refused
    if blocked is not None:
        return Conclusion(_stopped(ctx, step, blocked, timed_out, now), waiting)
    failures = [o for o in outcomes if o.result is Result.ERROR]
    if failures:
        # The API failing is a wait like any other: it has the step's clock and shows its error; the
        # step neither moves on nor stamps its own clock.
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        waiting = f"{what_failed(failures[0].action)} failed: {failures[0].message}{more}"
        return Conclusion(_past_timeout(ctx, step, waiting, now) if timed_out else [], waiting)
    if any(o.result is Result.CONFLICT for o in outcomes):
        return Conclusion([], waiting)  # someone changed the node first: the next pass re-reads and decides again
    if step.stamp_on_success and any(o.result is Result.OK for o in outcomes):
        # This pass started something with its own clock (the driver restart): start that clock.
        # Not when every attempt found its pod gone already: a restart that keeps "deleting" a pod
        # nobody can find must still run into its timeout.
        return Conclusion([Annotate(node.name, {step.stamp_on_success: rfc3339(now), **clear_if_blocked(node)})],
                          waiting)
    if step.trigger is not None:
        return Conclusion([_moved_on(ctx, step.trigger, now)], waiting)
    if timed_out and waiting:
        return Conclusion(_past_timeout(ctx, step, waiting, now), waiting)
    if clear_if_blocked(node):
        unblocked = Event(node.name, "Normal", f"no longer blocked in {node.state.value}")
        return Conclusion([Annotate(node.name, CLEAR_BLOCK), unblocked], waiting)
    return Conclusion([], waiting)


def _waiting(step: Step, outcomes: Sequence[Outcome], spent: str) -> str | None:
    """What the node waits on: its evictions under way, the step's own wait, budgets spent elsewhere."""
    evicted = [o.action for o in outcomes if isinstance(o.action, Evict) and o.result is Result.OK]
    # Evicting is a wait like any other: its clock runs, however many passes it evicts again.
    evicting = evicted and not step.returning  # pods that keep coming back are named by their owner instead
    notes = [f"evicting {len(evicted)} pod{'s' if len(evicted) != 1 else ''}: {_keys(evicted)}"] if evicting else []
    notes += [note for note in (step.waiting, spent) if note]
    return "; ".join(notes) or None


def _stopped(ctx: NodeContext, step: Step, blocked: Blocked, timed_out: bool, now: float) -> list[Action]:
    """A node something outside upgrader stops: the step's fallback (past its timeout, or at once when
    waiting cannot help), a failure past the timeout under onBlockedTimeout: fail, else a block."""
    node = ctx.node
    if step.fallback and (timed_out or (step.hopeless and step.blocked is not None)):
        return fallback(ctx, step, blocked.reason, now)
    if timed_out and ctx.policy.on_blocked_timeout is OnBlockedTimeout.FAIL:
        reason = f"{blocked.reason}; blocked past the {step.timeout}s timeout"
        return fail(node, FailureKind.of_block(blocked.kind), reason, now, ready_driver_uid(ctx))
    suffix = f" (past the {step.timeout}s timeout)" if timed_out else ""
    return block(node, Blocked(blocked.kind, blocked.reason + suffix), now)


def _moved_on(ctx: NodeContext, trigger: str, now: float) -> Transition:
    """The step is done: the node's transition, with its new state's clock and entry records."""
    node = ctx.node
    assert node.state is not None
    annotations = {STATE_SINCE: rfc3339(now), **CLEAR_BLOCK}
    # The Operator's timers of a state taken over from it are honoured until the node leaves it.
    annotations.update({key: None for key in OPERATOR_TIMERS if key in node.annotations})
    probe = fire(node.name, node.state, trigger, ctx.flags)
    annotations.update(entry_annotations(probe.target, ctx))
    if probe.target is State.DONE:
        annotations.update({key: None for key in PER_UPGRADE})
        annotations.update({key: None for key in FINISHED_OPERATOR_KEYS if key in node.annotations})
        annotations[REQUESTED_ANNOTATION] = None
        annotations[STATE_SINCE] = rfc3339(now)
    return replace(probe, annotations=annotations, message=f"{node.state.value} -> {probe.target.value}")


def _past_timeout(ctx: NodeContext, step: Step, waiting: str, now: float) -> list[Action]:
    """A wait that ran past the step's timeout: the fallback, a failure (the restart and validation,
    or under onBlockedTimeout: fail), else a block that keeps the state's clock as its since."""
    node = ctx.node
    assert node.state is not None
    if step.fallback:
        return fallback(ctx, step, f"{waiting} (past the {step.timeout}s timeout)", now)
    if step.fail_on_timeout or ctx.policy.on_blocked_timeout is OnBlockedTimeout.FAIL:
        why = f"not done within the {step.timeout}s timeout: {waiting}"
        return fail(node, _failure_kind(node.state, step, waiting), why, now, ready_driver_uid(ctx))
    # Only the job and eviction steps time out into a block; the restart and validation fail.
    assert step.kind is not None, f"{node.state.value}: a step that times out into a block names its kind"
    waited = Blocked(step.kind, f"{waiting} (past the {step.timeout}s timeout)")
    return block(node, waited, now, since=node.annotations.get(STATE_SINCE))


def _keys(evictions: Sequence[Action], limit: int = 5) -> str:
    keys = sorted(f"{getattr(a, 'namespace', '')}/{getattr(a, 'name', '')}" for a in evictions)
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def what_failed(action: Action) -> str:
    """The attempt an API error stopped, in a person's words."""
    if isinstance(action, Evict):
        return f"eviction of {action.namespace}/{action.name}"
    if isinstance(action, DeletePod):
        return f"deletion of driver pod {action.namespace}/{action.name}"
    if isinstance(action, SetUnschedulable):
        return "cordon" if action.unschedulable else "uncordon"
    return f"{type(action).__name__} on {getattr(action, 'node', '?')}"


# What a fallback transition says, by trigger.
FALLBACKS = {
    "deletion_failed": "GPU pod deletion cannot finish: {reason}; drain.enable is set, so the node is drained",
}


def restart_clock(node: NodeView, why: str, now: float) -> list[Action]:
    """A state whose clock is lost or another state's: its waits count from now, and the node says so."""
    assert node.state is not None
    marks = {STATE_SINCE: rfc3339(now), SINCE_STATE: node.state.value, **clear_if_blocked(node)}
    return [Annotate(node.name, marks), Event(node.name, "Warning", f"{why}: its waits count from now")]


def fallback(ctx: NodeContext, step: Step, reason: str, now: float) -> list[Action]:
    """The step cannot finish, and the policy names another way (GPU pod deletion -> drain)."""
    assert ctx.node.state is not None and step.fallback is not None
    message = FALLBACKS[step.fallback].format(reason=reason)
    annotations = {STATE_SINCE: rfc3339(now), **CLEAR_BLOCK}
    transition = fire(ctx.node.name, ctx.node.state, step.fallback, ctx.flags, annotations, message)
    return [transition, Event(ctx.node.name, "Warning", message)]


def ready_driver_uid(ctx: NodeContext) -> str | None:
    """The node's live driver pod at the newest revision, Ready or not, if any: a failure records it,
    and a node that failed validation recovers only once another one is Ready (its driver changed)."""
    target = ctx.target_hash
    at_target = [p for p in ctx.driver_pods if not p.terminating and target and p.revision_hash == target]
    ready = [p for p in at_target if p.ready]
    return (ready or at_target)[0].uid if at_target else None


def clear_if_blocked(node: NodeView) -> dict[str, str | None]:
    return dict(CLEAR_BLOCK) if node.annotations.get(BLOCKED_KIND) else {}


def waiting_entry(ctx: NodeContext, concluded: Conclusion) -> NodeWaiting | None:
    """A node that waits normally this pass (not blocked, not moving on), for the status."""
    actions = concluded.actions
    if not concluded.waiting or any(isinstance(a, Transition) for a in actions) or ctx.node.state is None:
        return None
    if any(isinstance(a, Annotate) and a.annotations.get(BLOCKED_KIND) for a in actions):
        return None
    since = ctx.node.annotations.get(STATE_SINCE, "")
    return NodeWaiting(ctx.node.name, ctx.node.state.value, concluded.waiting, since)


def _refusals(step: Step, outcomes: Sequence[Outcome], disrupted: frozenset[str]) -> tuple[Blocked | None, str]:
    """Evictions a PodDisruptionBudget refused: a block, or a wait when the budget is only spent.

    A budget at full health that still allows no disruption will not change without a person: that
    blocks (and halts). A budget spent by a disruption in progress (one of its pods is down, or this
    pass evicted one, on another node or on this one) comes back by itself: the node waits, within
    its timeout.
    """
    blocked: dict[str, list[str]] = {}
    spent: dict[str, list[str]] = {}
    details: dict[str, str] = {}
    own = spent_budgets(step, outcomes)  # budgets this node's own evictions spent in this batch
    for outcome in outcomes:
        if outcome.result is not Result.BLOCKED:
            continue
        action = outcome.action
        pod_key = f"{getattr(action, 'namespace', '')}/{getattr(action, 'name', '')}"
        pdb = step.pdb_of.get(pod_key)
        budget = pdb.key if pdb else "(unknown budget)"
        in_use = pdb is not None and (
            pdb.key in disrupted or pdb.key in own or pdb.current_healthy < pdb.expected_pods
        )
        (spent if in_use else blocked).setdefault(budget, []).append(pod_key)
        details[budget] = (
            f"disruptionsAllowed={pdb.disruptions_allowed}, currentHealthy={pdb.current_healthy}, "
            f"desiredHealthy={pdb.desired_healthy}"
            if pdb
            else outcome.message
        )
    block = None
    if blocked:
        block = Blocked(
            BlockKind.PDB,
            "; ".join(
                f"eviction of {', '.join(pods)} refused by PodDisruptionBudget {budget} ({details[budget]})"
                for budget, pods in sorted(blocked.items())
            ),
        )
    wait = "; ".join(
        f"eviction of {', '.join(pods)} waits for PodDisruptionBudget {budget}: a disruption is in progress"
        for budget, pods in sorted(spent.items())
    )
    return block, wait


def spent_budgets(step: Step, outcomes: Sequence[Outcome]) -> set[str]:
    """PodDisruptionBudgets the step's successful evictions used up."""
    out = set()
    for outcome in outcomes:
        action = outcome.action
        if isinstance(action, Evict) and outcome.result is Result.OK:
            pdb = step.pdb_of.get(f"{action.namespace}/{action.name}")
            if pdb is not None:
                out.add(pdb.key)
    return out


def _failure_kind(state: State, step: Step, waiting: str) -> FailureKind:
    if state is State.POD_RESTART_REQUIRED:
        image_errors = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName")
        pulls = any(e in waiting for e in image_errors)
        return FailureKind.IMAGE if pulls else FailureKind.DRIVER_RESTART
    if state is State.VALIDATION_REQUIRED:
        return FailureKind.VALIDATION
    return FailureKind.of_block(step.kind) if step.kind else FailureKind.FAILED


def block(node: NodeView, blocked: Blocked, now: float, since: str | None = None) -> list[Action]:
    """Record why the node cannot go on, and since when (kept while the kind of block stays)."""
    same_kind = node.annotations.get(BLOCKED_KIND) == blocked.kind
    kept = node.annotations.get(BLOCKED_SINCE) if same_kind else None
    wanted = {
        BLOCKED_KIND: blocked.kind.value,
        BLOCKED_REASON: blocked.reason,
        BLOCKED_SINCE: kept or since or rfc3339(now),
    }
    if all(node.annotations.get(k) == v for k, v in wanted.items()):
        return []
    assert node.state is not None
    message = (
        f"blocked in {node.state.value} since {wanted[BLOCKED_SINCE]}: {blocked.reason}; "
        f"see {blocked.kind.runbook}"
    )
    return [Annotate(node.name, wanted), Event(node.name, "Warning", message)]


def fail(node: NodeView, kind: FailureKind, reason: str, now: float, ready_driver: str | None = None) -> list[Action]:
    """`ready_driver`: the driver pod Ready at the newest revision as the node fails (see recovery)."""
    assert node.state is not None
    stamp = rfc3339(now)
    transition = fire(
        node.name,
        node.state,
        "fail",
        annotations={
            STATE_SINCE: stamp,
            FAILED_AT: stamp,
            FAILED_KIND: kind.value,
            FAILED_STATE: node.state.value,
            FAILED_REASON: reason,
            FAILED_DRIVER_POD: ready_driver,
            **CLEAR_BLOCK,
        },
        message=reason,
    )
    return [
        transition,
        Event(node.name, "Warning", f"upgrade failed in {node.state.value}: {reason}; see {kind.runbook}"),
    ]




def project(snapshot: Snapshot, applied: Iterable[Action]) -> Snapshot:
    """The snapshot with successfully applied node writes folded in; it remembers which nodes it
    changed, so their facts alone are worked out again (core/node/facts.py)."""
    nodes = dict(snapshot.nodes)
    applied = list(applied)
    for action in applied:
        if isinstance(action, Transition) and action.node in nodes:
            nodes[action.node] = nodes[action.node].with_changes(action.target, action.annotations)
        elif isinstance(action, Annotate) and action.node in nodes:
            nodes[action.node] = nodes[action.node].with_changes(None, action.annotations)
        elif isinstance(action, SetUnschedulable) and action.node in nodes:
            # A recovery's cordon: the steps that follow in the same pass must not cordon it again.
            changed = nodes[action.node].with_changes(None, action.record)
            nodes[action.node] = replace(changed, unschedulable=action.unschedulable)
        elif isinstance(action, SetTaints) and action.node in nodes:
            nodes[action.node] = replace(nodes[action.node], taints=action.taints)
        elif isinstance(action, SetLabels) and action.node in nodes:
            nodes[action.node] = nodes[action.node].with_labels(action.labels).with_changes(None, action.record)
    folded = replace(snapshot, nodes=nodes)
    kinds = Transition | Annotate | SetUnschedulable | SetLabels | SetTaints
    touched = {a.node for a in applied if isinstance(a, kinds) and a.node in nodes}
    folded.memo[FOLDED] = Folded(snapshot.memo.get("facts"), snapshot.driver_pods, frozenset(touched))
    return folded
