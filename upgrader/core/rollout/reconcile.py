"""One reconcile pass, decided in order: detect, each node's step, the phase, starts, then the status.

The caller hands in `apply`, which writes a batch of actions and says what came of each (the kube
adapter in the controller, an in-memory API server in the property tests). The pass folds what
landed into its snapshot before deciding the next batch, so later decisions see earlier writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from upgrader.core.fleet import eviction_backoff as backoff
from upgrader.core.fleet import pool_shares as pools
from upgrader.core.fleet.managed import Fleet
from upgrader.core.fleet.managed import fleet as managed_fleet
from upgrader.core.fleet.preflight import Preflight
from upgrader.core.model.actions import Action, Annotate, Event, Outcome, Transition, WriteStatus
from upgrader.core.model.states import STATE_SINCE, UNLABELLED
from upgrader.core.model.timefmt import parse_or_none
from upgrader.core.model.views import Snapshot
from upgrader.core.policy.policy import Policy
from upgrader.core.report.document import PoolStatus, RolloutStatus
from upgrader.core.report.entries import NodeWaiting
from upgrader.core.report.kinds import Phase
from upgrader.core.report.pooled import combined, pool_entry
from upgrader.core.rollout import starts as starting
from upgrader.core.rollout import stepping as rollout
from upgrader.core.rollout.detect import detect
from upgrader.core.rollout.node_events import transition_events
from upgrader.core.rollout.pending_taint import taint_actions
from upgrader.core.rollout.phase import PhaseVerdict, Scope, judge
from upgrader.core.rollout.status import Decided, phase_events, rollout_status

Apply = Callable[[list[Action]], list[Outcome]]


@dataclass
class PassOutcome:
    snapshot: Snapshot  # as the pass's own writes left it
    before: PhaseVerdict  # the phase the pass judged its starts by (with pools, the fleet's; each pool had its own)
    status: RolloutStatus  # the status at the end of the pass
    outcomes: list[Outcome] = field(default_factory=list)
    transitions: list[tuple[str, str, float | None]] = field(default_factory=list)  # from, to, seconds in from
    started: list[str] = field(default_factory=list)  # nodes whose start was applied


class _Pass:
    def __init__(self, snapshot: Snapshot, now: float, apply: Apply) -> None:
        self.snapshot = snapshot
        self.now = now
        self.apply = apply
        self.outcomes: list[Outcome] = []
        self.transitions: list[tuple[str, str, float | None]] = []

    def act(self, actions: list[Action]) -> list[Outcome]:
        """Apply a batch; record the transitions that landed and fold them into the snapshot.

        Events go last and only for what landed: a node whose label or annotation write failed (a
        conflict) gets none of the batch's events, and every state change that landed gets its own.
        """
        if not actions:
            return []
        writes: list[Action] = [a for a in actions if not isinstance(a, Event)]
        done = self.apply(writes) if writes else []
        refused = {o.action.node for o in done if isinstance(o.action, Transition | Annotate) and not o.ok}
        applied = [o.action for o in done if o.ok]
        for action in applied:
            if not isinstance(action, Transition):
                continue
            if action.source is None:  # a node's first labelling: counted, no time in a state
                self.transitions.append((UNLABELLED, action.target.value, None))
                continue
            since = parse_or_none(self.snapshot.nodes[action.node].annotations.get(STATE_SINCE))
            self.transitions.append(
                (action.source.value, action.target.value, None if since is None else self.now - since)
            )
        events: list[Action] = [a for a in actions if isinstance(a, Event) and a.node not in refused]
        events += [e for a in applied if isinstance(a, Transition) for e in transition_events(a)]
        if events and (done or not writes):  # none when the writes were not applied (lease lost)
            done = done + self.apply(events)
        self.outcomes.extend(done)
        self.snapshot = rollout.project(self.snapshot, applied)
        return done


def reconcile(
    snapshot: Snapshot, policy: Policy, now: float, apply: Apply, preflight: Preflight | None = None
) -> PassOutcome:
    """`preflight` (run): what a start is judged by before it is made (core/fleet/preflight.py)."""
    work = _Pass(snapshot, now, apply)
    waiting: list[NodeWaiting] = []
    disrupted: set[str] = set()  # PodDisruptionBudgets this pass spent on evictions
    # autoUpgrade false: nothing is labelled or started, but a node in progress finishes (halfway it
    # would stay cordoned with its GPU pods gone), as under `upgrader pause`.
    # An interlock (the GPU Operator's upgrade controller on, a driver DaemonSet not OnDelete): another
    # writer drives the drivers, so no node is written at all; the status says why (core/fleet/interlocks.py).
    locked = bool(snapshot.interlocks)
    if policy.auto_upgrade and not locked:
        work.act(detect(work.snapshot, policy, now))
    pauses = backoff.current(backoff.read(snapshot.control.previous), snapshot.pdbs)
    counted: set[str] = set()  # budgets whose refusals this pass counted already
    for ctx, step in [] if locked else rollout.node_steps(work.snapshot, policy, now):
        send, held = backoff.hold(step.attempts, step.pdb_of, pauses, now, disrupted)
        attempted = work.act(send)
        if send and not attempted:
            continue  # nothing was applied (the controller lost its lease mid-pass)
        pauses = backoff.after(pauses, step.pdb_of, attempted, now, counted, disrupted)
        attempted = [*attempted, *held]
        decided = rollout.conclude(ctx, step, attempted, now, frozenset(disrupted))
        disrupted.update(rollout.spent_budgets(step, attempted))
        work.act(decided.actions)
        entry = rollout.waiting_entry(ctx, decided)
        if entry is not None:
            waiting.append(entry)
    fleet = managed_fleet(work.snapshot)
    managed = [n.name for n in fleet.managed]
    acknowledged = starting.acknowledged_failures(work.snapshot)
    if policy.pools:
        before, status, started = _pooled(work, policy, fleet, acknowledged, preflight, waiting)
    else:
        before = judge(work.snapshot, policy, Scope(fleet), acknowledged)
        schedule, starts = starting.start_nodes(
            work.snapshot, policy, now, before.may_start, acknowledged, preflight
        )
        started = [o.action.node for o in work.act(starts) if o.ok and isinstance(o.action, Transition)]
        status = rollout_status(work.snapshot, policy, Scope(fleet), now, acknowledged,
                                Decided(schedule, waiting, before))
    if not locked:  # an interlock: no node is written, taints neither
        work.act(list(taint_actions(work.snapshot, policy, managed, status.phase)))
    if pauses:
        status = replace(status, eviction_backoff=backoff.to_status(pauses))
    previous = work.snapshot.control.previous
    if previous is None or status.settled() != previous.settled():
        work.act([WriteStatus(status), *phase_events(previous, status, managed[0] if managed else None)])
    return PassOutcome(work.snapshot, before, status, work.outcomes, work.transitions, started)



def _pooled(
    work: _Pass, policy: Policy, fleet: Fleet, acknowledged: set[str], preflight: Preflight | None,
    waiting: list[NodeWaiting],
) -> tuple[PhaseVerdict, RolloutStatus, list[str]]:
    """Starts and status pool by pool (core/fleet/pool_shares.py): each pool judged halted or paused by its own
    phase, and started under its own policy; the whole's status made of theirs (core/report/pooled.py)."""
    now, previous = work.now, work.snapshot.control.previous
    parts = pools.shares(work.snapshot, policy, fleet)
    work.act(pools.pins(parts))  # before the starts judge the budgets: a move after this frees no slot
    before = judge(work.snapshot, policy, Scope(fleet), acknowledged)  # the whole's, before any pool starts
    verdicts = [judge(work.snapshot, share.policy, Scope(share, share.name), acknowledged) for share in parts]
    halted = any(v.phase is Phase.HALTED for v in verdicts)
    started: list[str] = []
    entries: list[PoolStatus] = []
    for share, verdict in zip(parts, verdicts, strict=True):
        may = verdict.may_start and not (halted and policy.halt_across_pools)
        part = starting.Part(
            [work.snapshot.nodes[n.name] for n in share.managed],  # as this pass's earlier starts left them
            [work.snapshot.nodes[n] for n in [*share.skipped, *(n for n, _ in share.invalid)]],
            previous.pool(share.name) if previous is not None else None, share.stage_prefix, f"census:{share.name}",
        )
        schedule, starts = starting.start_nodes(work.snapshot, share.policy, now, may, acknowledged, preflight, part)
        done = work.act(starts)
        started += [o.action.node for o in done if o.ok and isinstance(o.action, Transition)]
        status = rollout_status(work.snapshot, share.policy, Scope(share, share.name), now, acknowledged,
                                Decided(schedule, waiting, verdict))
        entries.append(pool_entry(share.name, share.selects, status))
    base = rollout_status(work.snapshot, policy, Scope(fleet), now, acknowledged,
                          Decided(waiting=waiting, verdict=before))
    return before, combined(base, entries, policy.halt_across_pools), started
