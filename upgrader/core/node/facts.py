"""What a pass derives from each node alone, worked out once per node as the cluster last changed it.

A node's facts depend only on its view, its driver pods and the driver DaemonSets: which DaemonSets
select it, why it needs an upgrade, whether its driver can be judged, what upgrade of upgrader's it
left unfinished, and what is wrong with its clock at any time. At 15,000 nodes working them out costs
a pass more than everything else it decides (bench/README.md), and between two passes almost no node
changes. So the controller keeps a `FactsCarry` from pass to pass (`Snapshot.carry`): a node's facts
are reused while its view and its driver pods are the very objects they were derived from (the
watch-fed copy hands the same view out until the node changes) and the DaemonSets are equal; any
other node's are worked out again. Without a carry (plan, tests) they are worked out once per snapshot.
The answers are the same either way: the carry only saves the work (tests/core/test_node_facts.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import is_
from typing import TypeVar, cast

from upgrader.core.model.states import (
    BLOCKED_KIND,
    FAILED_AT,
    FAILED_REASON,
    HELD_KIND,
    REQUESTED_ANNOTATION,
    SAFE_LOAD_ANNOTATION,
    STARTED_AT,
    STATE_SINCE,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.model.timefmt import parse_or_none
from upgrader.core.model.views import FOLDED, DriverSet, Folded, NodeView, PodView, Snapshot
from upgrader.core.node.gpu_room import Room, RoomMemo
from upgrader.core.node.steps import FUTURE_TOLERANCE, lost_clock

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    node: NodeView  # the view they were derived from
    pods: tuple[PodView, ...]  # and its driver pods
    listed: Sequence[PodView]  # the very sequence they came in (the next pass may hand it again)
    selecting: tuple[str, ...]  # the driver DaemonSets whose node selector matches it
    reason: str | None  # upgrade_reason
    known: bool  # driver_known
    unfinished: str | None  # unfinished_cycle
    clock: str | None  # lost_clock at no particular time: set by hand, missing or unreadable
    since: float | None  # its state's clock (gpu-upgrader.io/state-since), read
    blocked: bool  # carries a block record
    held: bool  # carries a preflight hold record

    def clock_lost(self, now: float) -> bool:
        """lost_clock(node, now) is not None: the clock as the facts have it, or one in our future."""
        return self.clock is not None or (self.since is not None and self.since - now > FUTURE_TOLERANCE)


@dataclass
class FactsCarry:
    """Facts kept between passes by the controller. `generation` moves whenever any node's facts
    were worked out again, a node came or went, or the DaemonSets changed: results derived from the
    whole fleet's facts (the fleet split) are reused while it stands still, and updated from the
    nodes that changed when the generations since are known (`changes`)."""

    driver_sets: tuple[DriverSet, ...] | None = None
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    generation: int = 0
    # generation -> the nodes whose facts it worked out again; None: a node came or went, or the
    # DaemonSets changed (all is worked out again). The last KEPT_CHANGES generations only.
    changes: dict[int, frozenset[str] | None] = field(default_factory=dict)
    derived: dict[str, tuple[int, object]] = field(default_factory=dict)  # name -> (generation, result)
    room: RoomMemo = field(default_factory=RoomMemo)  # each node's free room (capacity.room_by_node)
    room_model: Room | None = None  # the last judging pass's (core/node/gpu_room.py), for the next to update


def facts_of(snapshot: Snapshot) -> dict[str, NodeFacts]:
    """Every node's facts for this snapshot (memoised on it, and carried over from earlier passes)."""
    known = snapshot.memo.get("facts")
    if known is None:
        known = snapshot.memo["facts"] = _refresh(snapshot, carry_of(snapshot))
    return known


def generation_of(snapshot: Snapshot) -> int | None:
    """The carry's generation once this snapshot's facts are in it; None without a carry."""
    facts_of(snapshot)
    carry = carry_of(snapshot)
    return carry.generation if carry is not None else None


def carry_of(snapshot: Snapshot) -> FactsCarry | None:
    return snapshot.carry if isinstance(snapshot.carry, FactsCarry) else None


KEPT_CHANGES = 16


def changed_since(carry: FactsCarry, generation: int) -> set[str] | None:
    """The nodes whose facts changed after `generation`; None when that is not known."""
    out: set[str] = set()
    for step in range(generation + 1, carry.generation + 1):
        names = carry.changes.get(step)
        if names is None:
            return None
        out |= names
    return out


def derived(
    snapshot: Snapshot, key: str, compute: Callable[[], T], update: Callable[[T, set[str]], T] | None = None
) -> T:
    """A result worked out from the nodes, their driver pods and the DaemonSets alone (never the
    policy or the time), each node's part from that node alone: kept on the snapshot, and in the
    carry while its generation stands; `update` makes it anew from the kept one and the nodes that
    changed since, when those are known (tests/core/test_node_facts.py: the same as `compute`)."""
    if key in snapshot.memo:
        return cast(T, snapshot.memo[key])
    generation, carry = generation_of(snapshot), carry_of(snapshot)
    kept = carry.derived.get(key) if carry is not None else None
    changed = changed_since(carry, kept[0]) if carry is not None and kept is not None and update else None
    if carry is not None and kept is not None and kept[0] == generation:
        value = cast(T, kept[1])
    elif update is not None and kept is not None and changed is not None:
        value = update(cast(T, kept[1]), changed)
        assert carry is not None
        carry.derived[key] = (carry.generation, value)
    else:
        value = compute()
        if carry is not None:
            carry.derived[key] = (carry.generation, value)
    snapshot.memo[key] = value
    return value


def _refresh(snapshot: Snapshot, carry: FactsCarry | None) -> dict[str, NodeFacts]:
    if carry is None:
        return {name: derive(snapshot, node) for name, node in snapshot.nodes.items()}
    sets = tuple(snapshot.driver_sets)
    if carry.driver_sets != sets:
        carry.driver_sets, carry.facts = sets, {}
    previous, out, whole = carry.facts, {}, len(carry.facts) != len(snapshot.nodes)
    moved: set[str] = set()
    folded = snapshot.memo.get(FOLDED)
    if isinstance(folded, Folded) and folded.facts is previous and folded.driver_pods is snapshot.driver_pods:
        out = dict(previous)  # the pass's own writes changed these nodes' views, nothing else
        for name in folded.nodes:
            out[name] = derive(snapshot, snapshot.nodes[name])
        moved.update(folded.nodes)
    else:
        empty: list[PodView] = []
        for name, node in snapshot.nodes.items():
            kept = previous.get(name)
            if kept is None or kept.node is not node or not _same(kept, snapshot.driver_pods.get(name, empty)):
                whole = whole or kept is None
                kept = derive(snapshot, node)
                moved.add(name)
            out[name] = kept
    if whole or moved:
        carry.generation += 1
        carry.changes[carry.generation] = None if whole else frozenset(moved)
        carry.changes.pop(carry.generation - KEPT_CHANGES, None)
    carry.facts = out
    return out


def _same(kept: NodeFacts, pods: Sequence[PodView]) -> bool:
    """The same driver pods: the very list (the watch-fed copy's grouping keeps a node's list while
    its pods stand still, kube/pod_groups.py; lists are never changed in place) or the same views."""
    return kept.listed is pods or (len(kept.pods) == len(pods) and all(map(is_, kept.pods, pods)))


def derive(snapshot: Snapshot, node: NodeView) -> NodeFacts:
    listed = snapshot.driver_pods.get(node.name, ())
    return NodeFacts(
        node=node,
        pods=tuple(listed),
        listed=listed,
        selecting=tuple(d.name for d in snapshot.driver_sets if d.selects(node)),
        reason=upgrade_reason(snapshot, node),
        known=driver_known(snapshot, node),
        unfinished=unfinished_cycle(node),
        clock=lost_clock(node),
        since=parse_or_none(node.annotations.get(STATE_SINCE)),
        blocked=bool(node.annotations.get(BLOCKED_KIND)),
        held=bool(node.annotations.get(HELD_KIND)),
    )


def upgrade_reason(snapshot: Snapshot, node: NodeView) -> str | None:
    """Why the node needs an upgrade, or None when its driver is current."""
    if node.annotations.get(REQUESTED_ANNOTATION) == "true":
        return f"annotation {REQUESTED_ANNOTATION}=true"
    if node.annotations.get(SAFE_LOAD_ANNOTATION):
        return f"its driver pod waits for a safe load (annotation {SAFE_LOAD_ANNOTATION})"
    if node.state is State.UPGRADE_REQUIRED and node.annotations.get(FAILED_AT):
        # Relabelled after a failure: its driver pod may well be "current" and still broken.
        return f"retrying after upgrade-failed: {node.annotations.get(FAILED_REASON, '(no reason recorded)')}"
    if node.state is State.UPGRADE_REQUIRED and unfinished_cycle(node):
        # Relabelled by hand in the middle of an upgrade: it goes through again rather than be
        # declared done with upgrader's cordon on.
        return f"relabelled upgrade-required before its upgrade ended ({unfinished_cycle(node)} is still set)"
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


def driver_known(snapshot: Snapshot, node: NodeView) -> bool:
    """The node runs a driver pod (not terminating) of a DaemonSet whose newest revision is known:
    only then can it be judged current."""
    for pod in snapshot.driver_pods.get(node.name, []):
        ds = snapshot.driver_set_of(pod)
        if not pod.terminating and ds is not None and ds.newest_hash:
            return True
    return False


def unfinished_cycle(node: NodeView) -> str | None:
    """The record of an upgrade upgrader started and did not finish (they are cleared when one ends),
    or None."""
    return next((key for key in (STARTED_AT, WAS_UNSCHEDULABLE) if node.annotations.get(key)), None)
