"""The managed nodes counted once per pass: per state, per domain and state, and the few a status
names one by one (in progress, failed, held). The phase (before the starts) and the status (after
them) read it each pass; the count is kept on the snapshot, and from pass to pass while no node
changed (core/node/facts.py), so a pass over an idle 15,000-node fleet does not count it twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from upgrader.core.model.states import HELD_KIND, IN_PROGRESS, STATE_COUNT_KEYS, UNLABELLED, State
from upgrader.core.model.views import NodeView, Snapshot
from upgrader.core.node.facts import carry_of, changed_since, generation_of
from upgrader.core.policy.parts import FailureDomains
from upgrader.core.rollout.schedule import Grouping, is_unavailable

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
    position: dict[str, int]  # name -> its place in `nodes`


def census(snapshot: Snapshot, domains: FailureDomains, managed: list[str], slot: str = "census") -> Census:
    """The `managed` nodes counted, grouped by `domains` (all the census reads of the policy).
    `slot`: where it is kept; each pool (core/fleet/pool_shares.py) has its own, so none evicts another's."""
    key = (domains, tuple(managed))
    kept = snapshot.memo.get(slot)
    if kept is not None and kept[0] == key:
        return kept[1]
    carry, generation = carry_of(snapshot), generation_of(snapshot)
    carried = carry.derived.get(slot) if carry is not None else None
    counted = None
    if carry is not None and carried is not None and carried[1][0] == key:  # type: ignore[index]
        if carried[0] == generation:
            counted = carried[1][1]  # type: ignore[index]
        elif (moved := changed_since(carry, carried[0])) is not None:
            counted = recount(snapshot, domains, carried[1][1], moved)  # type: ignore[index]
    if counted is None:
        counted = count(snapshot, domains, managed)
    if carry is not None:
        carry.derived[slot] = (carry.generation, (key, counted))
    snapshot.memo[slot] = (key, counted)
    return counted


def _key(state: State | None) -> str:
    return state.value if state is not None else UNLABELLED


def _watched(node: NodeView) -> bool:
    state = node.state
    return state in WATCHED and (state is not State.UPGRADE_REQUIRED or bool(node.annotations.get(HELD_KIND)))


def count(snapshot: Snapshot, domains: FailureDomains, managed: list[str]) -> Census:
    nodes = [snapshot.nodes[n] for n in managed]
    by_state = dict.fromkeys(STATE_COUNT_KEYS, 0)
    per_domain: dict[str, Counter[State | None]] = {}
    by_domain: dict[str, list[NodeView]] = {}
    in_progress, watched, unavailable = [], [], 0
    for node in nodes:
        state, domain = node.state, domains.domain_of(node.labels)
        by_state[_key(state)] += 1
        per_domain.setdefault(domain, Counter())[state] += 1
        by_domain.setdefault(domain, []).append(node)
        unavailable += is_unavailable(node)
        if state in IN_PROGRESS:
            in_progress.append(node)
        if _watched(node):
            watched.append(node.name)
    order = domains.ordered(by_domain)
    grouping = Grouping(order, {d: by_domain[d] for d in order}, len(in_progress), unavailable)
    position = {name: i for i, name in enumerate(managed)}
    return Census(nodes, grouping, by_state, per_domain, order, in_progress, watched, position)


def recount(snapshot: Snapshot, domains: FailureDomains, old: Census, moved: set[str]) -> Census | None:
    """The census of the same managed nodes where only `moved` changed since `old`: their old
    parts taken out, their new ones put in. None when one moved to another domain (count again)."""
    position, touched = old.position, sorted(n for n in moved if n in old.position)
    if not touched:
        return old
    nodes, by_state, per_domain = list(old.nodes), dict(old.by_state), dict(old.per_domain)
    unavailable, changed = old.grouping.unavailable, set()
    for name in touched:
        was, now = old.nodes[position[name]], snapshot.nodes[name]
        domain = domains.domain_of(now.labels)
        if domain != domains.domain_of(was.labels):
            return None
        nodes[position[name]] = now
        by_state[_key(was.state)] -= 1
        by_state[_key(now.state)] += 1
        if domain not in changed:
            changed.add(domain)
            per_domain[domain] = Counter(per_domain[domain])
        counts = per_domain[domain]
        counts[was.state] -= 1
        if not counts[was.state]:
            del counts[was.state]
        counts[now.state] += 1
        unavailable += is_unavailable(now) - is_unavailable(was)
    grouped = old.grouping.by_domain
    by_domain = {d: [snapshot.nodes[n.name] for n in grouped[d]] if d in changed else grouped[d] for d in grouped}
    in_progress = _merged([n.name for n in old.in_progress], touched, position, lambda n: n.state in IN_PROGRESS,
                          snapshot)
    watched = _merged(old.watched, touched, position, _watched, snapshot)
    grouping = Grouping(old.order, by_domain, len(in_progress), unavailable)
    return Census(nodes, grouping, by_state, per_domain, old.order, [snapshot.nodes[n] for n in in_progress],
                  watched, position)


def _merged(
    names: list[str], touched: list[str], position: dict[str, int], keep: Callable[[NodeView], bool],
    snapshot: Snapshot,
) -> list[str]:
    """`names` (in the managed order) without the touched nodes, and with those of them `keep` keeps."""
    gone = set(touched)
    out = [n for n in names if n not in gone] + [n for n in touched if keep(snapshot.nodes[n])]
    return sorted(out, key=position.__getitem__)
