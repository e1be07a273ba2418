"""Starts: which nodes leave upgrade-required this pass, and what is recorded of them first; when
none can, an Event saying what they wait on (once per change of it)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache

from upgrader.core.fleet.managed import fleet
from upgrader.core.fleet.pdb_choice import pdb_check
from upgrader.core.fleet.preflight import Hold, Preflight, hold, hold_marks, node_findings
from upgrader.core.model.actions import Action, Annotate, Event
from upgrader.core.model.gpupods import GpuClaims
from upgrader.core.model.states import (
    DRIVER_DELETED_AT,
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    GPU_BEFORE,
    HELD,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OUR_CORDON,
    RESTART_ONLY,
    STARTED_AT,
    STARTED_POOL,
    STATE_SINCE,
    TARGET_REVISION,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.model.timefmt import rfc3339
from upgrader.core.model.views import NodeView, PodView, Snapshot
from upgrader.core.node.capacity import evicted_gpu_pods, room_by_node, shortage
from upgrader.core.node.context import context, restart_only_digest
from upgrader.core.node.facts import carry_of
from upgrader.core.node.gpu_room import Room
from upgrader.core.node.machine import fire
from upgrader.core.policy.alert_gate import gate_verdict
from upgrader.core.policy.policy import OnInsufficientCapacity, OnNodeFailure, Policy
from upgrader.core.policy.windows import verdict
from upgrader.core.report.document import LastStatus
from upgrader.core.report.kinds import HoldKind
from upgrader.core.rollout.census import census
from upgrader.core.rollout.node_events import waiting_events
from upgrader.core.rollout.schedule import (
    Checks,
    HoldCheck,
    Nodes,
    RoomCheck,
    Schedule,
    Standing,
    canary_domain,
    domain_of,
    plan_starts,
)
from upgrader.core.rollout.stepping import CLEAR_BLOCK


@dataclass(frozen=True)
class Part:
    """The nodes one schedule is made for when the policy has pools (core/fleet/pool_shares.py): a pool's
    managed nodes and bystanders, its entry in the last status, and its stages' prefix."""

    nodes: list[NodeView]
    bystanders: list[NodeView]
    previous: LastStatus | None
    stage_prefix: str
    slot: str  # its census's (core/rollout/census.py)


def start_nodes(
    snapshot: Snapshot,
    policy: Policy,
    now: float,
    may_start: bool,
    acknowledged: set[str],
    preflight: Preflight | None = None,
    part: Part | None = None,
) -> tuple[Schedule, list[Action]]:
    """Pick nodes to leave upgrade-required, recording what they were like before we touched them;
    or say what they wait on, when that changed since the last status. With `preflight` (run), a
    candidate with a blocking finding is held instead, and its hold recorded on it. With `part`,
    only a pool's nodes, under the pool's `policy`."""
    if part is None:
        split = fleet(snapshot)
        bystanders = [snapshot.nodes[name] for name in [*split.skipped, *(name for name, _ in split.invalid)]]
        part = Part(split.managed, bystanders, snapshot.control.previous, "", "census")
    nodes = part.nodes
    last = part.previous.current_domain if part.previous is not None else None
    prefix = part.stage_prefix
    promoted = snapshot.control.promoted
    if prefix:
        promoted = {stage[len(prefix):]: at for stage, at in promoted.items() if stage.startswith(prefix)}
    waits_for_room = policy.gpu_capacity.on_insufficient is OnInsufficientCapacity.WAIT
    grouping = census(snapshot, policy.failure_domains, [n.name for n in nodes], part.slot).grouping
    checks = Checks(
        window=verdict(policy.windows(), now),
        gate=gate_verdict(policy.alert_gate, snapshot.alerts),
        room=room_check(snapshot, policy) if waits_for_room else None,
        hold=hold_check(snapshot, policy, now, preflight) if preflight is not None else None,
        pdbs=pdb_check(snapshot) if policy.pdb_aware_starts else None,
    )
    standing = Standing(settled_failures(nodes, policy, acknowledged), last, promoted)
    schedule = plan_starts(Nodes(nodes, part.bystanders, grouping=grouping), policy, now,
                           may_start and policy.auto_upgrade, standing, checks)
    if prefix and schedule.wait is not None and schedule.wait.stage is not None:
        stage, finish = schedule.wait.stage
        schedule = replace(schedule, wait=replace(schedule.wait, stage=(prefix + stage, finish)))
    actions: list[Action] = list(waiting_events(schedule.wait, part.previous))
    for name, holding in schedule.judged:
        if name not in schedule.starts:
            actions.extend(_hold_record(snapshot.nodes[name], holding, now))
    stamp = rfc3339(now)
    for name in schedule.starts:
        node = snapshot.nodes[name]
        ctx = context(snapshot, name, policy)
        before = node.annotations.get(GPU_BEFORE) or node.gpu_allocatable
        # Cordoned now: by someone else, unless a record from an earlier try of ours says it is ours.
        # Schedulable now: any cordon from here on is ours, whatever an old record says.
        recorded = node.annotations.get(WAS_UNSCHEDULABLE)
        foreign = (recorded if recorded in ("true", "false") else "true") if node.unschedulable else "false"
        digest = restart_only_digest(ctx)
        annotations: dict[str, str | None] = {
            STATE_SINCE: stamp,
            STARTED_AT: stamp,
            STARTED_POOL: prefix[:-1] if prefix else None,  # the pool whose budgets it counts against
            WAS_UNSCHEDULABLE: foreign,
            # The Operator's record too, so the node stays cordoned should the Operator take it back.
            OPERATOR_INITIAL_UNSCHEDULABLE: "true" if foreign == "true" else None,
            GPU_BEFORE: before,
            TARGET_REVISION: ctx.target_hash,
            RESTART_ONLY: digest,
            FAILED_KIND: None,
            FAILED_STATE: None,
            FAILED_REASON: None,
            FAILED_AT: None,
            FAILED_DRIVER_POD: None,
            DRIVER_DELETED_AT: None,
            **CLEAR_BLOCK,
            **dict.fromkeys(HELD),
        }
        if not node.unschedulable:
            annotations[OUR_CORDON] = None  # no cordon now: a mark left from an earlier try is no one's
        how = f"restart-only upgrade (DRIVER_CONFIG_DIGEST {digest} unchanged)" if digest else "upgrade"
        pool = f"pool {prefix[:-1]}, " if prefix else ""
        message = f"starting {how} in {pool}domain {schedule.current_domain}"
        actions.append(fire(name, State.UPGRADE_REQUIRED, "start", annotations=annotations, message=message))
    return schedule, actions


def _hold_record(node: NodeView, holding: Hold | None, now: float) -> list[Action]:
    marks, said = hold_marks(node, holding, now)
    if not marks:
        return []
    return [Annotate(node.name, marks), *([Event(node.name, "Warning" if holding else "Normal", said)] if said else [])]


def hold_check(snapshot: Snapshot, policy: Policy, now: float, preflight: Preflight) -> HoldCheck:
    """For `plan_starts`: the preflight's hold on a node about to start, judged by `plan`'s own
    findings (core/fleet/preflight.py) against the DaemonSet's driver; its pods are read for the CUDA check."""
    inputs = preflight.inputs

    def check(name: str) -> Hold | None:
        ctx = context(snapshot, name, policy)
        target = ctx.driver_set.driver_version if ctx.driver_set else None
        if target is None:
            if not inputs.asks:
                return None
            which = f"driver DaemonSet {ctx.driver_set.name}" if ctx.driver_set else "no driver DaemonSet"
            lacks = f"{which} sets no DRIVER_VERSION: the preflight cannot judge the node"
            return Hold(HoldKind.PREFLIGHT_INPUT.value, lacks)
        restart_only = restart_only_digest(ctx) is not None
        pods = snapshot.node_pods.get(name)
        if pods is None and preflight.pods_of is not None and not restart_only:
            pods = preflight.pods_of(name)
        return hold(node_findings(ctx.node, target, ctx.driver_set, pods, inputs, now, restart_only))

    return check


def room_check(snapshot: Snapshot, policy: Policy) -> RoomCheck:
    """For `plan_starts`: why a node's evicted GPU pods would find no room (None for a restart-only
    upgrade, which evicts nothing), counting the nodes starting before it in this pass as cordoned."""

    @cache  # once a pass, when a start is first judged: a pass that starts nothing reads nothing more
    def fleet() -> tuple[dict[str, list[PodView]], GpuClaims, Room]:
        pods, claims = snapshot.node_pods, snapshot.gpu_claims
        if snapshot.fleet_pods is not None:
            everyone, more = snapshot.fleet_pods()
            pods = {**everyone, **pods}
            claims = None if claims is None or more is None else {**more, **claims}  # None: unreadable
        return pods, claims, _room_model(snapshot, pods)

    def check(name: str, starting: Collection[str]) -> str | None:
        if restart_only_digest(context(snapshot, name, policy)):
            return None
        pods, claims, model = fleet()
        return shortage(name, evicted_gpu_pods(pods.get(name, []), claims), model, starting)

    return check


def _room_model(snapshot: Snapshot, pods: Mapping[str, Sequence[PodView]]) -> Room:
    """The fleet's room model; with the controller's carry, each node's room is kept while its view
    and pods stand still, and the model of the last judging pass is updated for the nodes that
    changed (core/node/gpu_room.py), unless so many did that building it again costs less."""
    carry = carry_of(snapshot)
    if carry is None:
        return Room(snapshot.nodes, room_by_node(snapshot.nodes, pods))
    model, carry.room_model = carry.room_model, None  # none kept, should this pass fail halfway
    changed: set[str] = set()
    room = room_by_node(snapshot.nodes, pods, carry.room, changed)
    if model is None or REBUILD_SHARE * len(changed) > len(room):
        model = Room(snapshot.nodes, room)
    else:
        model.update(snapshot.nodes, room, changed)
    carry.room_model = model
    return model


REBUILD_SHARE = 8  # a model is built again when more than one node in 8 changed since it was kept


def settled_failures(nodes: list[NodeView], policy: Policy, acknowledged: set[str]) -> set[str]:
    """Failed nodes the rollout may leave behind: acknowledged ones, and under onNodeFailure:
    continue every one outside the canary domain."""
    if policy.on_node_failure is not OnNodeFailure.CONTINUE:
        return set(acknowledged)
    canary = canary_domain(nodes, policy)
    return set(acknowledged) | {n.name for n in nodes if n.state is State.FAILED and domain_of(n, policy) != canary}


def acknowledged_failures(snapshot: Snapshot) -> set[str]:
    """Failed nodes an operator acknowledged (`upgrader acknowledge`): the failure named is the one the
    node carries now (its failed-at, as recorded), so a later failure of the same node is not."""
    named = snapshot.control.acknowledged
    return {
        n.name
        for n in snapshot.nodes.values()
        if n.state is State.FAILED and n.annotations.get(FAILED_AT) and named.get(n.name) == n.annotations[FAILED_AT]
    }
