"""When the rollout should be done, from what it has seen: the median time a node took from its start
to upgrade-done (`started-at` to its `state-since` there), the nodes left, maxParallelUpgrades, and a
soak for each domain still to come. Anchored on the newest state change in the fleet, not on the
pass's clock, so the estimate moves only when a node does (the status is written only when it
changes). None until a node has finished, or when none is left."""

from __future__ import annotations

import math
from collections.abc import Sequence

from upgrader.core.model.states import IN_PROGRESS, STARTED_AT, STATE_SINCE, State
from upgrader.core.model.timefmt import parse_or_none, rfc3339
from upgrader.core.model.views import NodeView
from upgrader.core.report.entries import Eta


def estimate(
    nodes: Sequence[NodeView], max_parallel_upgrades: int, soak_seconds: int, domains_left: int
) -> Eta | None:
    """The ETA of `nodes` upgraded `max_parallel_upgrades` at a time (0: all at once), with a soak of
    `soak_seconds` before each of the `domains_left` domains still to start; None: cannot say yet."""
    durations: list[float] = []
    left = 0
    newest: float | None = None
    for node in nodes:
        since = parse_or_none(node.annotations.get(STATE_SINCE))
        if since is not None and (newest is None or since > newest):
            newest = since
        if node.state is State.UPGRADE_REQUIRED or node.state in IN_PROGRESS:
            left += 1
        elif node.state is State.DONE:
            started = parse_or_none(node.annotations.get(STARTED_AT))
            if since is not None and started is not None and since >= started:
                durations.append(since - started)
    if not durations or not left or newest is None:
        return None
    durations.sort()
    per_node = durations[len(durations) // 2]
    waves = math.ceil(left / (max_parallel_upgrades or left))
    seconds = waves * per_node + domains_left * soak_seconds
    return Eta(rfc3339(newest + seconds), round(per_node), len(durations), left)  # the median, of from_nodes
