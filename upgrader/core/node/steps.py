"""What each in-progress state does in one pass: try once, say what blocks, never wait.

A step returns the actions to attempt now, the actions that follow if all attempts succeed (the
state transition), and, when it cannot go on, why (a block or a normal wait) with its timeout.
Timeouts count from the time the node entered its state (`STATE_SINCE`), so they survive restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from upgrader.core.model.actions import Annotate, DeletePod, Evict
from upgrader.core.model.selectors import parse_label_selector
from upgrader.core.model.states import (
    DRIVER_DELETED_AT,
    DRIVER_POD_UID,
    IN_PROGRESS,
    RESTART_ONLY,
    SAFE_LOAD_ANNOTATION,
    SINCE_STATE,
    STATE_SINCE,
    TARGET_REVISION,
    State,
)
from upgrader.core.model.timefmt import parse_or_none
from upgrader.core.model.views import NodeView, PdbView, PodView
from upgrader.core.node.context import NodeContext, same_install_config, superseded_driver_pods
from upgrader.core.node.cordon import cordon, uncordon
from upgrader.core.node.fence import fence, lift, operands_left, unguarded
from upgrader.core.node.step import Blocked, Step
from upgrader.core.node.step_checks import (
    budgets_over,
    came_back,
    count_of,
    drained,
    pod_names,
    pod_sources,
    validation_problems,
)
from upgrader.core.report.kinds import BlockKind


def _pdb_for(pod: PodView, pdbs: list[PdbView]) -> PdbView | None:
    return next((p for p in pdbs if p.covers(pod)), None)


# ----- the states ---------------------------------------------------------------------------------


def wait_for_jobs(ctx: NodeContext) -> Step:
    settings = ctx.policy.wait_for_completion
    step = Step(
        ctx.node.name, kind=BlockKind.WAIT_FOR_JOBS, trigger="jobs_finished", timeout=settings.timeout_seconds
    )
    if not settings.pod_selector:
        return step
    selector = parse_label_selector(settings.pod_selector)
    running = [p for p in ctx.pods if not p.terminal and selector.matches(p.labels)]
    if running:
        limit = f"timeout {settings.timeout_seconds}s" if settings.timeout_seconds else "no timeout"
        step.trigger = None
        step.waiting = (
            f"waiting for {count_of(len(running), 'job pod')} to finish: {pod_names(running)} "
            f"(waitForCompletion.podSelector {settings.pod_selector}, {limit})"
        )
    return step


def _evictions(
    ctx: NodeContext,
    pods: list[PodView],
    force: bool,
    empty_dir: bool,
    kind: BlockKind,
    knob: str,
    trigger: str,
    timeout: int,
    fallback: str | None = None,
) -> Step:
    """Evict `pods` unless one of them may not be touched under the policy; done when all are gone.

    With a `fallback` (GPU pod deletion under drain.enable) the pods it may evict go first, and the
    fallback takes the rest: a narrow drain.podSelector only has to cover what deletion could not.
    """
    step = Step(ctx.node.name, kind=kind, timeout=timeout, fallback=fallback)
    if not pods:
        step.trigger = trigger
        return step
    # A pod already terminating is on its way out whoever owns it: waited for, never a refusal.
    unmanaged = [p for p in pods if p.owner_kind is None and not force and not p.terminating]
    scratch = [p for p in pods if p.empty_dir and not empty_dir and not p.terminating]
    if unmanaged or scratch:
        reasons = []
        if unmanaged:
            reasons.append(f"{pod_names(unmanaged)} not managed by a controller (set {knob}.force to delete)")
        if scratch:
            verb = "uses" if len(scratch) == 1 else "use"
            reasons.append(f"{pod_names(scratch)} {verb} emptyDir (set {knob}.deleteEmptyDir to delete)")
        forbidden = "cannot evict: " + "; ".join(reasons)
        pods = [p for p in pods if p not in unmanaged and p not in scratch]
        if fallback is None or not pods:
            step.blocked = Blocked(kind, forbidden)
            step.hopeless = True  # the policy forbids it: no wait changes that
            return step
        step.waiting = f"{forbidden}; the rest go first"
    evicting = [p for p in pods if not p.terminating]
    for pod in evicting:
        step.attempts.append(Evict(ctx.node.name, pod.namespace, pod.name, pod.uid))
        pdb = _pdb_for(pod, ctx.pdbs)
        if pdb is not None:
            step.pdb_of[pod.key] = pdb
    terminating = [p for p in pods if p.terminating]
    waits = [step.waiting] if step.waiting else []
    if terminating:
        waits.append(f"waiting for {count_of(len(terminating), 'pod')} to terminate: {pod_names(terminating)}")
    returned = came_back(ctx, pods)
    if returned:
        # Named by what keeps putting them there: a pod's own name changes with every return, and a
        # block whose reason changed would be written, and announced, again every pass.
        step.returning = True
        waits.append(
            f"{pod_sources(returned)} came back to the node after it was cordoned (created after it entered "
            f"{ctx.node.state.value if ctx.node.state else 'this state'}): something places them on it "
            "directly (nodeName, a pinned Job, a toleration), so evicting them again does not end"
        )
    step.waiting = "; ".join(waits) or None
    return step


EVERY_POD = parse_label_selector("")


def _deletable_gpu_pods(ctx: NodeContext) -> list[PodView]:
    # DaemonSet pods would come straight back on the cordoned node; if one holds GPUs, the restart
    # step's check names it instead.
    return [p for p in ctx.gpu_pods() if not p.mirror and p.owner_kind != "DaemonSet"]


def gpu_pod_deletion(ctx: NodeContext) -> Step:
    settings = ctx.policy.gpu_pod_deletion
    pods = _deletable_gpu_pods(ctx)
    return _evictions(
        ctx,
        pods,
        settings.force,
        settings.delete_empty_dir,
        BlockKind.POD_DELETION,
        "gpuPodDeletion",
        "gpu_pods_gone",
        settings.timeout_seconds,
        # As in the GPU Operator: a deletion that cannot finish is followed by a drain.
        "deletion_failed" if ctx.policy.drain.enable else None,
    )


def drain(ctx: NodeContext) -> Step:
    settings = ctx.policy.drain
    selector = parse_label_selector(settings.pod_selector)
    # The drain follows a GPU pod deletion that could not finish: the GPU pods it left (a PDB that
    # did not allow them within its timeout) are the drain's too, under its own force and timeout,
    # or the restart would wait on them for ever (docs/migrating-from-gpu-operator.md).
    left = {p.key for p in _deletable_gpu_pods(ctx) if drained(p, EVERY_POD)}
    pods = [p for p in ctx.pods if drained(p, selector) or p.key in left]
    return _evictions(
        ctx,
        pods,
        settings.force,
        settings.delete_empty_dir,
        BlockKind.DRAIN,
        "drain",
        "drained",
        settings.timeout_seconds,
    )


def restart_driver(ctx: NodeContext) -> Step:
    step = Step(ctx.node.name, timeout=ctx.policy.pod_restart.timeout_seconds, fail_on_timeout=True)
    target = ctx.target_hash
    old_uid = ctx.node.annotations.get(DRIVER_POD_UID)
    live = [p for p in ctx.driver_pods if not p.terminating]
    superseded = superseded_driver_pods(ctx)  # the test that also sends a validating node back here
    stale = [p for p in live if p.uid == old_uid or p in superseded]
    if ctx.node.annotations.get(DRIVER_DELETED_AT):
        step.clock = DRIVER_DELETED_AT  # the restart's own clock, not the time spent getting here
    restart_only = "restart_only" in ctx.flags
    if restart_only and stale and not all(same_install_config(p, ctx.driver_set) for p in stale):
        step.trigger = "config_changed"  # the driver will be reinstalled: its GPU pods go first
        return step
    if stale:
        # The guard goes up first: a GPU user still there blocks the node, and one that comes back (a
        # DaemonSet's, a nodeName pod's) after its owner deleted it is refused by the kubelet.
        if not restart_only and _guarding(ctx, step):
            return step
        clients = [] if restart_only else ctx.gpu_holders()
        if clients:
            verb = "holds" if len(clients) == 1 else "hold"
            step.blocked = Blocked(
                BlockKind.GPU_PODS,
                f"{count_of(len(clients), 'pod')} still {verb} GPUs: {pod_names(clients)}; "
                "the driver cannot unload under them",
            )
            return step
        step.attempts.extend(DeletePod(ctx.node.name, p.namespace, p.name, p.uid) for p in stale)
        step.stamp_on_success = DRIVER_DELETED_AT
        step.waiting = f"restarting driver pod {pod_names(stale)}" + budgets_over(stale, ctx.pdbs) + _unguarded(ctx)
        return step
    fresh = [p for p in live if target is None or p.revision_hash == target]
    ready = bool(fresh) and all(p.ready for p in fresh)
    unloading = ctx.node.annotations.get(DRIVER_DELETED_AT) or (fresh and SAFE_LOAD_ANNOTATION in ctx.node.annotations)
    if not restart_only and not ready and unloading and (late := ctx.gpu_holders()):
        # The check after the delete (or before a safe load): a GPU user there all the same is said, never run under.
        step.blocked = Blocked(
            BlockKind.GPU_PODS,
            f"{count_of(len(late), 'pod')} on the node during the driver restart "
            f"{'holds' if len(late) == 1 else 'hold'} GPUs: {pod_names(late)}; the driver cannot unload under them",
        )
        return step
    if fresh and ctx.node.annotations.get(SAFE_LOAD_ANNOTATION):
        # The new driver pod waits for a safe load: the node is ready for it now (k8s-operator-libs),
        # once nothing new can start using the GPU there.
        if not restart_only and _guarding(ctx, step):
            return step
        step.attempts.append(Annotate(ctx.node.name, {SAFE_LOAD_ANNOTATION: None}))
    changed = restart_only and [p for p in fresh if p.config_digest != ctx.node.annotations.get(RESTART_ONLY)]
    holders = ctx.gpu_holders() if changed else []
    if changed and holders:
        # The template changed between the decision and the new pod: that driver installs anew.
        step.blocked = Blocked(
            BlockKind.GPU_PODS,
            f"the driver configuration changed during a restart-only upgrade (DRIVER_CONFIG_DIGEST "
            f"{ctx.node.annotations.get(RESTART_ONLY)} -> {changed[0].config_digest}) while "
            f"{count_of(len(holders), 'pod')} still held GPUs: {pod_names(holders)}; move them off the node",
        )
        return step
    if ready:
        step.attempts.extend(a for a in [lift(ctx.node)] if a is not None)  # the operands (validators) come back
        step.trigger = "driver_restarted"
        return step
    if fresh:
        pod = fresh[0]
        detail = f": {pod.waiting_reason}" if pod.waiting_reason else ""
        if pod.waiting_message:
            detail += f": {pod.waiting_message}"
        step.waiting = f"driver pod {pod.key} not Ready{detail}"
    elif any(p.terminating for p in ctx.driver_pods):
        step.waiting = "waiting for the old driver pod to terminate"
    else:
        step.waiting = "waiting for the driver DaemonSet to create the new driver pod"
    return step


def _guarding(ctx: NodeContext, step: Step) -> bool:
    """The admission guard before the driver unloads (core/node/fence.py): True while it is being put up
    (its write this pass, or its operand pods still leaving); then the delete goes on pods listed after it."""
    pausing = fence(ctx.node)
    if pausing is not None:
        step.attempts.append(pausing)
        names = ", ".join(sorted(pausing.labels)) or "none on the node"
        step.waiting = f"pausing the GPU Operator's operands ({names}): no new GPU pod is admitted during the restart"
        return True
    left = operands_left(ctx.node, ctx.pods)
    if left:
        step.waiting = f"waiting for the paused operands to leave the node: {pod_names(left)}"
        return True
    return False


def _unguarded(ctx: NodeContext) -> str:
    if not unguarded(ctx.node):
        return ""
    return "; the node has no GPU Operator operand label to pause: nothing keeps a new GPU pod off it meanwhile"


def validate(ctx: NodeContext) -> Step:
    step = Step(ctx.node.name, timeout=ctx.policy.validation.timeout_seconds, fail_on_timeout=True)
    step.attempts.extend(a for a in [lift(ctx.node)] if a is not None)  # a fence still up (a recovered node's)
    if ctx.node.annotations.get(SAFE_LOAD_ANNOTATION):
        # The driver restarted after the node got here, and waits again: let it load (k8s-operator-libs).
        step.attempts.append(Annotate(ctx.node.name, {SAFE_LOAD_ANNOTATION: None}))
    if superseded_driver_pods(ctx):
        step.trigger = "driver_superseded"
        return step
    problems = validation_problems(ctx)
    if problems:
        step.waiting = "; ".join(problems)
    else:
        step.trigger = "validated"
    return step


def entry_annotations(target: State, ctx: NodeContext) -> dict[str, str | None]:
    """What a node records on entering `target`: the driver pod to replace and the revision to reach
    on entering restart; a restart-only node sent back to wait for jobs forgets it was one."""
    if target is State.WAIT_FOR_JOBS_REQUIRED and RESTART_ONLY in ctx.node.annotations:
        return {RESTART_ONLY: None}
    if target is State.POD_RESTART_REQUIRED:
        live = [p for p in ctx.driver_pods if not p.terminating]
        return {
            DRIVER_POD_UID: live[0].uid if live else None,
            DRIVER_DELETED_AT: None,  # a second restart (driver superseded) gets its own clock
            TARGET_REVISION: ctx.target_hash,
        }
    return {}


# A node's clock stamped this far or further ahead of this controller's clock is not trusted: another
# replica's clock runs ahead (docs/operations.md#which-clock-each-timer-runs-on).
FUTURE_TOLERANCE = 5.0


def lost_clock(node: NodeView, now: float | None = None) -> str | None:
    """Why the node's clock is not its state's: a state label set by hand (the clock names another
    state), a clock missing or unreadable, or (given `now`) one further than FUTURE_TOLERANCE in this
    controller's future, stamped by a replica whose clock runs ahead. None: the clock is good."""
    recorded = node.annotations.get(SINCE_STATE)
    if node.state is None:
        return None
    if recorded not in (None, node.state.value):  # no record (a node from before it existed) reads as ours
        return f"{node.state.value} was set by hand (the node's clock was for {recorded})"
    # A node in progress always has a clock; an idle one only once upgrader moved it (the GPU Operator's
    # done nodes never had one, and need none).
    kept = node.state in IN_PROGRESS or recorded is not None
    since = parse_or_none(node.annotations.get(STATE_SINCE))
    if kept and since is None:
        return f"the clock of {node.state.value} ({STATE_SINCE}) was missing or unreadable"
    if since is not None and now is not None and since - now > FUTURE_TOLERANCE:
        return (
            f"the clock of {node.state.value} ({STATE_SINCE} {node.annotations[STATE_SINCE]}) is "
            f"{since - now:.0f}s in this controller's future (stamped by a replica whose clock runs ahead?)"
        )
    return None


def clock_set_by_hand(ctx: NodeContext, now: float | None = None) -> Step | None:
    """No wait may count from a clock that is not the state's: this pass starts the state's clock (see
    `conclude`); the step runs from the next."""
    why = lost_clock(ctx.node, now)
    return None if why is None else Step(ctx.node.name, clock_lost=why)


STEPS: Mapping[State, Callable[[NodeContext], Step]] = {
    State.CORDON_REQUIRED: cordon,
    State.WAIT_FOR_JOBS_REQUIRED: wait_for_jobs,
    State.POD_DELETION_REQUIRED: gpu_pod_deletion,
    State.DRAIN_REQUIRED: drain,
    State.POD_RESTART_REQUIRED: restart_driver,
    State.VALIDATION_REQUIRED: validate,
    State.UNCORDON_REQUIRED: uncordon,
}
# States whose step needs the node's pods listed.
NEEDS_PODS = frozenset(
    {
        State.WAIT_FOR_JOBS_REQUIRED,
        State.POD_DELETION_REQUIRED,
        State.DRAIN_REQUIRED,
        State.POD_RESTART_REQUIRED,
        State.VALIDATION_REQUIRED,
    }
)
