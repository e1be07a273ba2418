"""The managed nodes counted once per pass: per state, per domain and state, and the few a status
names one by one (in progress, failed, held). `rollout_status` runs twice a pass over the whole
fleet; the count is kept on the snapshot, and from pass to pass while no node changed
(core/node_facts.py), so a pass over an idle 15,000-node fleet does not count it four times."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from upgrader.core.node_facts import carry_of, generation_of
from upgrader.core.policy import Policy
from upgrader.core.schedule import Grouping, domain_of, domain_order, is_unavailable
from upgrader.core.states import HELD_KIND, IN_PROGRESS, STATE_COUNT_KEYS, UNLABELLED, State
from upgrader.core.views import NodeView, Snapshot

# States in which a node can be named in the status's blocked, failed or held lists.
WATCHED = frozenset({*IN_PROGRESS, State.FAILED, State.UPGRADE_REQUIRED})


@dataclass(frozen=True)
class Census:
    nodes: list[NodeView]  # the managed nodes, in the order given
    grouping: Grouping  # by domain, for plan_starts
    by_state: dict[str, int]  # state (or UNLABELLED) -> nodes
    per_domain: dict[str, Counter[State | None]]
    order: list[str]  # domain_order of the nodes
    in_progress: list[NodeView]
    # The names blocked_nodes, failed_nodes and held_nodes can report, in the order given: nodes in
    # progress, failed, or at upgrade-required with a hold. The rest of the fleet they would skip anyway.
    watched: list[str]


def census(snapshot: Snapshot, policy: Policy, managed: list[str]) -> Census:
    key = (policy, tuple(managed))
    kept = snapshot.memo.get("census")
    if kept is not None and kept[0] == key:
        return kept[1]
    carry, generation = carry_of(snapshot), generation_of(snapshot)
    carried = carry.derived.get("census") if carry is not None else None
    if carried is not None and carried[0] == generation and carried[1][0] == key:  # type: ignore[index]
        counted = carried[1][1]  # type: ignore[index]
    else:
        counted = count(snapshot, policy, managed)
        if carry is not None:
            carry.derived["census"] = (carry.generation, (key, counted))
    snapshot.memo["census"] = (key, counted)
    return counted


def count(snapshot: Snapshot, policy: Policy, managed: list[str]) -> Census:
    nodes = [snapshot.nodes[n] for n in managed]
    by_state = dict.fromkeys(STATE_COUNT_KEYS, 0)
    per_domain: dict[str, Counter[State | None]] = {}
    by_domain: dict[str, list[NodeView]] = {}
    in_progress, watched, unavailable = [], [], 0
    for node in nodes:
        state, domain = node.state, domain_of(node, policy)
        by_state[state.value if state is not None else UNLABELLED] += 1
        per_domain.setdefault(domain, Counter())[state] += 1
        by_domain.setdefault(domain, []).append(node)
        unavailable += is_unavailable(node)
        if state in IN_PROGRESS:
            in_progress.append(node)
        if state in WATCHED and (state is not State.UPGRADE_REQUIRED or node.annotations.get(HELD_KIND)):
            watched.append(node.name)
    order = domain_order(nodes, policy)
    grouping = Grouping(order, {d: by_domain[d] for d in order}, len(in_progress), unavailable)
    return Census(nodes, grouping, by_state, per_domain, order, in_progress, watched)

