"""Which GPU nodes the rollout manages, and which it leaves alone (skipped, invalid) and why."""

from __future__ import annotations

from dataclasses import dataclass

from upgrader.core.node_facts import derived, facts_of
from upgrader.core.states import IN_PROGRESS, SKIP_LABEL, State
from upgrader.core.views import NodeView, Snapshot


@dataclass(frozen=True)
class Fleet:
    """Which nodes upgrader manages, and which it leaves alone and why."""

    managed: list[NodeView]
    skipped: list[str]
    invalid: list[tuple[str, str]]


def fleet(snapshot: Snapshot) -> Fleet:
    known = derived(snapshot, "fleet", lambda: _fleet(snapshot))
    return Fleet(list(known.managed), list(known.skipped), list(known.invalid))  # copies: callers may edit


def _fleet(snapshot: Snapshot) -> Fleet:
    managed, skipped, invalid = [], [], []
    facts = facts_of(snapshot)
    for name in sorted(snapshot.nodes):
        node = snapshot.nodes[name]
        selecting = facts[name].selecting
        # A node upgrader is working on stays its own, driver or not (its DaemonSet may have vanished).
        ours = node.state in IN_PROGRESS or node.state is State.FAILED
        if not (snapshot.driver_pods.get(node.name) or selecting or ours):
            continue
        if node.labels.get(SKIP_LABEL) == "true" and node.state not in IN_PROGRESS:
            skipped.append(node.name)  # a node already in progress finishes first: never leave it cordoned
        elif node.invalid:
            invalid.append((node.name, node.invalid))
        elif len(selecting) > 1:
            invalid.append((node.name, conflicting_daemonsets(list(selecting))))
        else:
            managed.append(node)
    return Fleet(managed, skipped, invalid)


CONFLICTING_DAEMONSETS = "selected by"


def conflicting_daemonsets(names: list[str]) -> str:
    """Two driver DaemonSets select the node: each one's pod would replace the other's, forever."""
    return (
        f"{CONFLICTING_DAEMONSETS} {len(names)} driver DaemonSets ({', '.join(sorted(names))}): their driver pods "
        "would replace each other; make their node selectors exclusive"
    )
