"""Which GPU nodes the rollout manages, and which it leaves alone (skipped, invalid) and why."""

from __future__ import annotations

from dataclasses import dataclass

from upgrader.core.model.states import IN_PROGRESS, SKIP_LABEL, State
from upgrader.core.model.views import NodeView, Snapshot
from upgrader.core.node.facts import derived, facts_of


@dataclass(frozen=True)
class Fleet:
    """Which nodes upgrader manages, and which it leaves alone and why."""

    managed: list[NodeView]
    skipped: list[str]
    invalid: list[tuple[str, str]]


def fleet(snapshot: Snapshot) -> Fleet:
    known = derived(
        snapshot, "fleet", lambda: _split(snapshot, None, None), lambda old, moved: _split(snapshot, old, moved)
    )
    return Fleet(list(known.fleet.managed), list(known.fleet.skipped), list(known.fleet.invalid))  # callers may edit


MANAGED, SKIPPED = "managed", "skipped"
Part = tuple[str, str] | None  # (MANAGED, ""), (SKIPPED, ""), ("invalid", why), or not ours


@dataclass(frozen=True)
class _Split:
    parts: dict[str, Part]  # every node, by name
    fleet: Fleet


def _split(snapshot: Snapshot, old: _Split | None, moved: set[str] | None) -> _Split:
    """Each node's part, worked out again only for the nodes that `moved` since `old` (all without)."""
    facts = facts_of(snapshot)
    if old is None or moved is None:
        parts = {name: _part(snapshot.nodes[name], facts[name].selecting, snapshot) for name in sorted(snapshot.nodes)}
    else:
        parts = dict(old.parts)  # the same nodes (one came or went: `moved` is None), in name order
        for name in moved:
            parts[name] = _part(snapshot.nodes[name], facts[name].selecting, snapshot)
    nodes = snapshot.nodes
    managed = [nodes[name] for name, part in parts.items() if part is not None and part[0] == MANAGED]
    skipped = [name for name, part in parts.items() if part is not None and part[0] == SKIPPED]
    invalid = [(name, part[1]) for name, part in parts.items() if part is not None and part[0] == "invalid"]
    return _Split(parts, Fleet(managed, skipped, invalid))


def _part(node: NodeView, selecting: tuple[str, ...], snapshot: Snapshot) -> Part:
    # A node upgrader is working on stays its own, driver or not (its DaemonSet may have vanished).
    ours = node.state in IN_PROGRESS or node.state is State.FAILED
    if not (snapshot.driver_pods.get(node.name) or selecting or ours):
        return None
    if node.labels.get(SKIP_LABEL) == "true" and node.state not in IN_PROGRESS:
        return SKIPPED, ""  # a node already in progress finishes first: never leave it cordoned
    if node.invalid:
        return "invalid", node.invalid
    if len(selecting) > 1:
        return "invalid", conflicting_daemonsets(list(selecting))
    return MANAGED, ""


CONFLICTING_DAEMONSETS = "selected by"


def conflicting_daemonsets(names: list[str]) -> str:
    """Two driver DaemonSets select the node: each one's pod would replace the other's, forever."""
    return (
        f"{CONFLICTING_DAEMONSETS} {len(names)} driver DaemonSets ({', '.join(sorted(names))}): their driver pods "
        "would replace each other; make their node selectors exclusive"
    )
