"""The rollout status: phase, nodes per state, blocked and failed nodes with their reasons, the ETA.

The same words reach `upgrader status`, the status ConfigMap, Events and metrics.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from upgrader.core.model.actions import Action, Event
from upgrader.core.model.states import (
    HELD_KIND,
    HELD_REASON,
    HELD_SINCE,
    IN_PROGRESS,
    STARTED_AT,
    STATE_SINCE,
    UNLABELLED,
    State,
)
from upgrader.core.model.timefmt import parse_or_none, rfc3339
from upgrader.core.model.views import Control, NodeView, Snapshot
from upgrader.core.policy.policy import Policy
from upgrader.core.report.document import LastStatus, RolloutStatus
from upgrader.core.report.entries import (
    Budget,
    DomainCount,
    Eta,
    InvalidNode,
    NodeFailed,
    NodeHeld,
    NodeInProgress,
    NodeWaiting,
    Target,
)
from upgrader.core.report.kinds import Phase, hold_runbook
from upgrader.core.rollout.census import census
from upgrader.core.rollout.phase import PhaseVerdict, Scope, blocked_nodes, failed_nodes, judge
from upgrader.core.rollout.schedule import Schedule
from upgrader.core.rollout.waits import Wait


def held_nodes(snapshot: Snapshot, managed: list[str]) -> list[NodeHeld]:
    """Nodes the preflight keeps at upgrade-required (core/fleet/preflight.py), as recorded on them."""
    out = []
    for name in managed:
        node = snapshot.nodes[name]
        kind = node.annotations.get(HELD_KIND)
        if kind and node.state is State.UPGRADE_REQUIRED:
            out.append(NodeHeld(name, kind, node.annotations.get(HELD_REASON, ""),
                                node.annotations.get(HELD_SINCE, ""), hold_runbook(kind)))
    return out


def _managed_waits(waiting: list[NodeWaiting], managed: list[str], blocked: set[str]) -> list[NodeWaiting]:
    names = set(managed) if waiting else set()
    return [w for w in waiting if w.node in names and w.node not in blocked]


@dataclass(frozen=True)
class Decided:
    """What this pass decided that the status reports: the phase judged before the starts (None:
    judged here, core/rollout/phase.py), the schedule (None: no starts were chosen) and the nodes that
    wait normally (None: not reported)."""

    schedule: Schedule | None = None
    waiting: list[NodeWaiting] | None = None
    verdict: PhaseVerdict | None = None


def rollout_status(
    snapshot: Snapshot, policy: Policy, scope: Scope, now: float, acknowledged: set[str], decided: Decided = Decided()
) -> RolloutStatus:
    """The status of `scope`'s nodes at `now`, as `decided` this pass."""
    members, schedule, waiting = scope.members, decided.schedule, decided.waiting
    managed, skipped, invalid = [n.name for n in members.managed], members.skipped, members.invalid
    verdict = decided.verdict or judge(snapshot, policy, scope, acknowledged)
    phase, halt = verdict.phase, verdict.halt_reason
    counted = census(snapshot, policy.failure_domains, managed, scope.slot)
    nodes, watched = counted.nodes, counted.watched
    by_state = dict(counted.by_state)
    paused_since = pause_since(snapshot.control, now)
    failed = during_pause_first(failed_nodes(snapshot, watched, acknowledged), paused_since)
    blocked = blocked_nodes(snapshot, watched)
    blocked_names = {b.node for b in blocked}
    per_domain, order = counted.per_domain, counted.order
    domains = []
    for name in order:
        counts = per_domain.get(name, Counter())
        domains.append(
            DomainCount(
                name, name == order[0], counts.total(), counts[State.DONE], sum(counts[s] for s in IN_PROGRESS),
                counts[State.FAILED], {**{s.value: counts[s] for s in State}, UNLABELLED: counts[None]},
            )
        )
    message = {
        Phase.PAUSED: paused_message(snapshot.control, halt, failed, bool(blocked_names)) if snapshot.control.paused
        else "autoUpgrade is false in the policy",
        Phase.HALTED: f"halted: {halt}",
        Phase.DONE: f"done: {by_state[State.DONE.value]} of {len(nodes)} nodes upgraded"
        + (f", {len(failed)} failed" if failed else "")
        # Never "done" in silence over nodes it could not manage (two driver DaemonSets, a bogus label).
        + (f"; {len(invalid)} invalid, not upgraded: {', '.join(sorted(n for n, _ in invalid))}" if invalid else ""),
        Phase.RUNNING: schedule.waiting if schedule and schedule.waiting else "rolling",
    }[phase]
    # What no node starting waits on, for scripts and `-o json`; the message says it in words.
    wait = schedule.wait if schedule and phase is Phase.RUNNING else None
    current = schedule.current_domain if schedule else None
    return RolloutStatus(
        phase=phase,
        message=message,
        halt_reason=halt,
        paused=snapshot.control.paused,
        paused_since=paused_since,
        waiting_on=wait.report() if wait else None,
        waiting_since=waiting_since(wait, scope.previous(snapshot.control), now),
        maintenance_window=schedule.window.report() if schedule and schedule.window.windows else None,
        alert_gate=schedule.gate.report() if schedule and schedule.gate.url else None,
        nodes_total=len(nodes),
        nodes_by_state=by_state,
        current_domain=current,
        next_domain=next_domain(domains, current),
        domains=tuple(domains),
        eta=estimate(nodes, policy.max_parallel_upgrades, policy.failure_domains.soak_seconds,
                     _domains_after(domains, current)),
        targets=tuple(
            Target(f"{d.namespace}/{d.name}", d.driver_version or "", d.newest_hash or "") for d in snapshot.driver_sets
        ),
        in_progress=tuple(
            NodeInProgress(n.name, n.state.value, n.annotations.get(STATE_SINCE, ""))
            for n in counted.in_progress
            if n.state is not None
        ),
        interlocks=tuple(i.text for i in snapshot.interlocks),
        blocked=tuple(blocked),
        held=tuple(held_nodes(snapshot, watched)),
        waiting=tuple(_managed_waits(waiting or [], managed, blocked_names)),
        failed=tuple(failed),
        skipped=tuple(skipped),
        invalid=tuple(InvalidNode(n, r) for n, r in invalid),
        budget=Budget(
            schedule.in_progress if schedule else by_state_in_progress(by_state),
            policy.max_parallel_upgrades,
            schedule.unavailable if schedule else None,
            schedule.max_unavailable if schedule else policy.max_unavailable_nodes(len(nodes)),
        ),
        updated_at=rfc3339(now),
    )


def next_domain(domains: list[DomainCount], current: str | None) -> str | None:
    """The domain that goes after `current` (or first, with none under way): the first one after it,
    in the rollout's order, with nodes not yet done."""
    names = [d.name for d in domains]
    after = names.index(current) + 1 if current in names else 0
    pending = [d.name for d in domains[after:] if d.done < d.nodes and d.name != current]
    return pending[0] if pending else None


def pause_since(control: Control, now: float) -> str | None:
    """Since when the rollout is paused, by this controller's clock: kept from the last status while
    the pause lasts, else now (None when not paused)."""
    if not control.paused:
        return None
    last = control.previous
    kept = last.paused_since if last is not None and last.paused else None
    return kept if kept is not None else rfc3339(now)


def during_pause_first(failed: list[NodeFailed], paused_since: str | None) -> list[NodeFailed]:
    """Failures that happened during the pause (both stamps by the controller) marked, and listed first."""
    start = parse_or_none(paused_since)

    def marked(entry: NodeFailed) -> NodeFailed:
        at = parse_or_none(entry.since)
        return replace(entry, during_pause=start is not None and at is not None and at >= start)

    return sorted((marked(f) for f in failed), key=lambda f: not f.during_pause)


def paused_message(control: Control, halt: str | None, failed: list[NodeFailed], blocked: bool) -> str:
    """A pause says what else holds the rollout: resuming alone never passes a halt."""
    paused = f"paused: {control.kept}" if control.kept else "paused by an operator"
    if halt is None:
        return f"{paused}; `upgrader resume` continues"
    during = [f.node for f in failed if f.during_pause and not f.acknowledged]
    when = f"; failed during the pause: {', '.join(during)}" if during else ""
    if blocked:  # blocks halt first (halt_reason)
        todo = "`upgrader resume` ends the pause; the block ends when its cause is gone"
    else:  # the halt names the failed node first
        todo = f"`upgrader resume` ends the pause, `upgrader acknowledge {halt.split(' ', 1)[0]}` the failure"
    return f"{paused}, and halted: {halt}{when}; {todo}"


def waiting_since(wait: Wait | None, previous: LastStatus | None, now: float) -> str | None:
    """Since when the rollout waits on this: kept while `waiting_on` stays the same, else now."""
    if wait is None:
        return None
    same = previous is not None and previous.waiting_on == wait.report() and previous.waiting_since is not None
    return previous.waiting_since if same and previous is not None else rfc3339(now)


def by_state_in_progress(by_state: dict[str, int]) -> int:
    return sum(by_state[s.value] for s in IN_PROGRESS)


def _domains_after(domains: list[DomainCount], current: str | None) -> int:
    """Domains after the current one with a node still to start: each brings a soak."""
    names = [d.name for d in domains]
    after = domains[names.index(current) + 1:] if current in names else []
    return sum(1 for d in after if d.by_state.get(State.UPGRADE_REQUIRED.value))


def estimate(
    nodes: Sequence[NodeView], max_parallel_upgrades: int, soak_seconds: int, domains_left: int
) -> Eta | None:
    """The ETA of `nodes` upgraded `max_parallel_upgrades` at a time (0: all at once), with a soak of
    `soak_seconds` before each of the `domains_left` domains still to start: the median time a node
    took from its start to upgrade-done (`started-at` to its `state-since` there) for each wave left.
    Anchored on the newest state change in the fleet, not on the pass's clock, so the estimate moves
    only when a node does (the status is written only when it changes). None until a node has
    finished, or when none is left."""
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


def phase_events(previous: RolloutStatus | None, status: RolloutStatus, first_node: str | None = None) -> list[Action]:
    """A Warning on the node that halted the rollout, when the rollout becomes Halted. Not again when a
    pause ends over the halt it was paused on: a Paused status keeps its `halt_reason`."""
    before = previous.phase if previous is not None else None
    if status.phase is not Phase.HALTED or before is Phase.HALTED:
        return []
    if previous is not None and before is Phase.PAUSED and previous.halt_reason == status.halt_reason:
        return []
    named = [b.node for b in status.blocked] + [f.node for f in status.failed]
    culprit = named[0] if named else None
    if culprit is None and status.interlocks:
        culprit = first_node  # an interlock names no node: the Event goes on the first one managed
    return [Event(culprit, "Warning", f"rollout {status.message}")] if culprit else []
