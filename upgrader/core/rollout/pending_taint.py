"""Evicted pods go to upgraded nodes: while a rollout runs, the nodes still to be upgraded carry our
`PreferNoSchedule` taint, so kube-scheduler (its TaintToleration score) prefers, for the pods the
current wave evicts, nodes whose upgrade is done. The taint is judged afresh from each node's state
every pass and written where it differs, so a controller killed at any moment leaves none behind once
it runs again: a node gets it at upgrade-required and in progress, and loses it at upgrade-done (or
failed), at the rollout's end, when the policy turns it off, and, under `onPause: remove`, while the
rollout is paused (docs/policy.md#taint-pending-nodes).

Only our own taint is ever removed or replaced: our key, our effect and our value (docs/policy.md#only-our-taint).
A taint with our key and another effect or value is someone else's, on any node, and stays."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from upgrader.core.model.actions import SetTaints
from upgrader.core.model.placement import Taint
from upgrader.core.model.states import IN_PROGRESS, STATE_LABEL, State
from upgrader.core.model.views import NodeView, Snapshot
from upgrader.core.policy.pending_taint_policy import OnPause, TaintPendingNodes
from upgrader.core.policy.policy import Policy
from upgrader.core.rollout.schedule import domain_of, domain_order

KEY = "gpu-upgrader.io/upgrade-pending"
EFFECT = "PreferNoSchedule"
VALUE = "upgrader"  # what tells our taint from another's with our key
OURS = Taint(KEY, VALUE, EFFECT)
# The taint an upgrader before this value wrote: ours on a node of the fleet only (one it labels), where
# nothing else writes our key; on any other node it may be anyone's.
LEGACY = Taint(KEY, "", EFFECT)
PER_PASS = 200  # taint writes a pass makes at most: a 15,000-node fleet is tainted over passes, not in one burst


def wanted(node: NodeView, active: bool) -> bool:
    """Whether `node` should carry our taint: still to be upgraded, while the rollout runs."""
    return active and (node.state is State.UPGRADE_REQUIRED or node.state in IN_PROGRESS)


def taint_writes(
    nodes: Sequence[NodeView], setting: TaintPendingNodes, phase: str, order: Callable[[], Mapping[str, int]],
    bystanders: Sequence[NodeView] = (),
) -> list[SetTaints]:
    """The nodes whose taints differ from what they should be, removals first, then the next in the
    domain order (`order()`: node -> its place, asked only when some write is due), at most PER_PASS;
    each write carries the node's whole new list. `bystanders` (skipped, invalid, not managed any
    more) never keep it."""
    active = (setting.enable and phase in ("Running", "Halted")) or (
        setting.enable and phase == "Paused" and setting.on_pause is OnPause.KEEP
    )
    due: list[SetTaints] = []
    for node, managed in [*((n, True) for n in nodes), *((n, False) for n in bystanders)]:
        mine = [t for t in node.taints if ours(t, node)]
        want = managed and wanted(node, active)
        if want and not mine and any(t.key == KEY and t.effect == EFFECT for t in node.taints):
            continue  # another's taint with our key and effect (one per key and effect): it steers as ours would
        if bool(mine) != want or (want and mine != [OURS]):
            kept = tuple(t for t in node.taints if t not in mine)
            due.append(SetTaints(node.name, (*kept, OURS) if want else kept))
    if len(due) > 1:
        place = order()
        due.sort(key=lambda w: (_adds(w), place.get(w.node, len(place)), w.node))
    return due[:PER_PASS]


def ours(taint: Taint, node: NodeView) -> bool:
    """Whether `taint` is upgrader's: ours exactly, or the one an earlier upgrader wrote, on a fleet node."""
    return taint == OURS or (taint == LEGACY and node.labels.get(STATE_LABEL) is not None)


def _adds(write: SetTaints) -> bool:
    return OURS in write.taints


def taint_actions(snapshot: Snapshot, policy: Policy, managed: Sequence[str], phase: str) -> list[SetTaints]:
    """This pass's taint writes for the fleet: the managed nodes by the policy and `phase`, any other
    node that carries our taint (skipped, invalid, no longer managed) losing it."""
    views = [snapshot.nodes[name] for name in managed]
    mine = set(managed)
    others = [n for n in snapshot.nodes.values() if n.name not in mine and any(ours(t, n) for t in n.taints)]
    return taint_writes(views, policy.taint_pending_nodes, phase, lambda: _place_in_order(views, policy), others)


def _place_in_order(views: Sequence[NodeView], policy: Policy) -> dict[str, int]:
    """Each managed node's place in the rollout's order (its domain's, then its name): the nodes of
    the coming waves are tainted first."""
    rank = {d: i for i, d in enumerate(domain_order(list(views), policy))}
    ordered = sorted(views, key=lambda n: (rank.get(domain_of(n, policy), len(rank)), n.name))
    return {n.name: i for i, n in enumerate(ordered)}
