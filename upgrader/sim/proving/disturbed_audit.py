"""The audit of a disturbed rollout (`check_disturbed`): hand edits, zone relabels, restarts with another
domain order and restores, told to the recorder, replayed against docs/policy.md's promises."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from upgrader.core.model.states import FAILED_AT, IN_PROGRESS, WAS_UNSCHEDULABLE, State
from upgrader.core.policy.policy import OnNodeFailure, Policy
from upgrader.sim.proving.recording import NO_DOMAIN, RESTORE, HistoryRecorder, Mark, NodeRecord, domain_order


class DisturbedAudit(NamedTuple):
    violations: list[str]
    # Judgments that failed on the world as it was, and held on the world without the disturbances
    # the deciding pass could not have seen yet: races with people and restores, not broken promises.
    excused: list[str]


class DisturbedAuditor(HistoryRecorder):
    """The recorder's judgment of a rollout that people and failures disturbed meanwhile."""

    # ----- the invariants of a disturbed rollout ----------------------------------------------------

    def check_disturbed(
        self,
        policy: Policy,
        managed: set[str],
        lag: float = 2.5,
        passes_after_restore: int = 2,
        pool: str | None = None,
    ) -> DisturbedAudit:
        """Every broken promise of a rollout that people, restarts and restores disturbed, judged by
        docs/policy.md's rules where they change:

        - domains follow each node's zone at the moment, and the domain order of the policy in effect
          (`policy_in_effect`); a domain is active while any of its nodes is in progress, and no node
          of another domain starts until none is; the rollout leaves the status's current domain only
          once it is finished, for the first unfinished domain in the order;
        - no start while a node in progress is blocked or a node is failed, unless that failure (as
          the controller recorded it, `failed-at`) is acknowledged; no start while paused;
        - budgets are judged when upgrader spends them: moving a node into progress (at most
          maxParallelUpgrades), making an available node unavailable (cordoned by anyone, in progress
          or failed, an unreadable label included: at most maxUnavailable); a person can overspend them;
        - upgrader cordons only nodes in progress or failed, uncordons only in uncordon-required, and
          never lifts a cordon someone else set before the node's upgrade began or before its own cordon
          (only one put back after someone lifted upgrader's own looks like upgrader's), nor leaves its own
          at upgrade-done, unless a person removed the record that says whose it is;
        - a restore takes the audit's knowledge back to the backup's moment with the objects;
        - `pool` (policy pools): `managed` is that pool's nodes, judged by the pool's policy
          (`Policy.for_pool`) and the pool's current domain in the status; other pools do not halt it.

        Starts, budgets and domain moves depend on other nodes, which no write can guard: a pass
        that decided before a hand edit landed (`lag`: how far its copy may trail the API server),
        or on a copy from before a restore (the first `passes_after_restore` passes after it), is
        judged again on the world without those disturbances; it is excused if it holds there.
        """
        self._pool = pool
        policy = _for_pool(policy, pool)
        history = self._history()
        violations: list[str] = []
        excused: list[str] = []
        world = _Fleet(policy)
        for index, event in enumerate(history):
            strict, lines = self._judge(world, event, managed)
            violations += strict
            if lines:
                skip = self._unseen(history, index, lag, passes_after_restore)
                if skip and any(self._holds_without(history, index, unseen, policy, managed)
                                for unseen in self._ways_unseen(history, skip)):
                    excused += lines
                else:
                    violations += lines
            self._apply(world, event, managed)
        for f in world.nodes.values():
            r = f.rec
            if r.state == State.DONE.value and r.unschedulable and not f.foreign and not f.record_lost:
                violations.append(f"{r.node} finished upgrade-done but was left cordoned")
        violations += self._pdb_bypass()
        return DisturbedAudit(violations, excused)

    def _holds_without(
        self, history: list[NodeRecord | Mark], index: int, unseen: set[int], policy: Policy, managed: set[str]
    ) -> bool:
        """Whether `history[index]` breaks nothing on the world without the disturbances `unseen`."""
        alt = _Fleet(policy)
        for earlier in history[:index]:
            if earlier.seq not in unseen:
                self._apply(alt, earlier, managed)
        return not self._judge(alt, history[index], managed)[1]

    @staticmethod
    def _ways_unseen(history: list[NodeRecord | Mark], skip: set[int]) -> list[set[int]]:
        """What the deciding pass may have missed: everything in `skip`, or all but the operators'
        intent up to the moment it read the control ConfigMap, which it reads once while it runs (one
        that started a node after a resume had read the resume, though it landed after the pass
        began; a pause that landed later still, it had not)."""
        intent = sorted(e.seq for e in history if isinstance(e, Mark) and e.kind == "control" and e.seq in skip)
        return [skip - set(intent[:seen]) for seen in range(len(intent) + 1)]

    _pool: str | None = None  # the pool check_disturbed judges (None: the whole fleet)

    def _status_domain_of(self, mark: Mark) -> str | None:
        return dict(mark.pools).get(self._pool) if self._pool is not None else mark.domain

    def foreign_cordons(self, managed: set[str]) -> set[str]:
        """The nodes cordoned now by someone else than upgrader, as far as the history tells (what a
        person answers a cordon-record block with)."""
        world = _Fleet(Policy())
        for event in self._history():
            self._apply(world, event, managed)
        return {name for name, f in world.nodes.items() if f.foreign}

    def _history(self) -> list[NodeRecord | Mark]:
        with self.cluster.store.lock:  # a copy while the rollout may still write
            events: list[NodeRecord | Mark] = [*self.records, *self.marks]
        return sorted(events, key=lambda e: e.seq)

    def _apply(self, world: _Fleet, event: NodeRecord | Mark, managed: set[str]) -> None:
        if isinstance(event, Mark):
            if event.kind == "policy" and event.policy is not None:
                world.policy = _for_pool(event.policy, self._pool)
            elif event.kind == "control":
                world.paused, world.acknowledged = event.paused, dict(event.acknowledged)
            elif event.kind == "status":
                world.status_domain = self._status_domain_of(event)
            elif event.kind == "backup":
                world.saved[event.seq] = ({n: replace(f) for n, f in world.nodes.items()}, world.status_domain)
            elif event.kind == RESTORE and event.token in world.saved:
                nodes, world.status_domain = world.saved[event.token]
                world.nodes = {n: replace(f) for n, f in nodes.items()}
            return
        r = event
        if r.node not in managed:
            return
        f = world.nodes.get(r.node)
        if f is None:  # the first record: what the rollout found
            world.nodes[r.node] = _Facts(r, foreign=r.unschedulable and r.node in self.initially_cordoned)
            return
        prev = f.rec
        if r.by is None:
            if r.unschedulable and not prev.unschedulable:
                f.ours_seq = r.seq
            if prev.state == State.UPGRADE_REQUIRED.value and r.state == State.CORDON_REQUIRED.value:
                f.record_lost = f.record_lost and r.unschedulable
                if not f.in_cycle:  # a cycle started again (set back by hand) keeps its first start
                    f.start_seq, f.in_cycle = r.seq, True
            elif r.state == State.DONE.value and prev.state != State.DONE.value:
                f.in_cycle = False
        elif r.by != RESTORE:  # a person's: a restore brought the facts back at its mark
            if r.unschedulable and not prev.unschedulable:
                f.foreign, f.foreign_seq = True, r.seq
            record = r.annotations.get(WAS_UNSCHEDULABLE)
            if record is None and prev.annotations.get(WAS_UNSCHEDULABLE) is not None and r.unschedulable:
                f.record_lost = True
            elif record in ("true", "false") and record != prev.annotations.get(WAS_UNSCHEDULABLE):
                f.record_lost = False  # someone said whose the cordon is
        if prev.unschedulable and not r.unschedulable:
            f.foreign = f.record_lost = False  # whoever's cordon it was is gone
        f.rec = r

    def _judge(self, world: _Fleet, event: NodeRecord | Mark, managed: set[str]) -> tuple[list[str], list[str]]:
        """(lines no race excuses, lines a race with an unseen disturbance may excuse) for `event`
        applied to `world` (not applied yet)."""
        if isinstance(event, Mark):
            domain = self._status_domain_of(event)
            if event.kind != "status" or event.by is not None or domain is None:
                return [], []
            return [], self._moved_on(world, world.status_domain, domain, f"status seq {event.seq}: the rollout")
        r = event
        f = world.nodes.get(r.node)
        if r.by is not None or r.node not in managed or f is None:
            return [], []
        prev, strict, lines = f.rec, [], []
        at = f"seq {r.seq} (rv {r.rv})"
        cordoned = r.unschedulable and not prev.unschedulable
        if cordoned and r.state not in {s.value for s in IN_PROGRESS} | {State.FAILED.value}:
            strict.append(f"{at}: {r.node} cordoned in {r.state}")
        if prev.unschedulable and not r.unschedulable:
            if r.state != State.UNCORDON_REQUIRED.value:
                strict.append(f"{at}: {r.node} uncordoned in {r.state}")
            # The one order that cannot be seen: someone lifted upgrader's own cordon of this cycle and
            # cordoned the node again; it then looks as upgrader left it (docs/policy.md#a-cordon-race).
            # A cordon in the window between the start and upgrader's own cordon is never excused.
            relifted = f.in_cycle and f.start_seq is not None and f.start_seq <= f.ours_seq < f.foreign_seq
            if f.foreign and not relifted:
                strict.append(f"{at}: {r.node} was cordoned by someone else and got uncordoned")
        after = replace(world, nodes={**world.nodes, r.node: replace(f, rec=r)})
        in_progress = {s.value for s in IN_PROGRESS}
        if prev.state == State.UPGRADE_REQUIRED.value and r.state == State.CORDON_REQUIRED.value:
            lines += self._start(after, r, at)
        parallel = world.policy.max_parallel_upgrades
        if prev.state not in in_progress and r.state in in_progress and parallel:
            busy = sorted(n for n, g in after.nodes.items() if g.rec.state in in_progress)
            if len(busy) > parallel:
                what = f"{r.node} moved into {r.state}"
                lines.append(f"{at}: {what}: {busy} in progress > maxParallelUpgrades {parallel}")
        if not _unavailable(prev) and _unavailable(r):
            down = sorted(n for n, g in after.nodes.items() if _unavailable(g.rec))
            limit = world.policy.max_unavailable_nodes(len(managed))
            if len(down) > limit:
                lines.append(f"{at}: {r.node} made unavailable: {down} unavailable > maxUnavailable {limit}")
        return strict, lines

    def _start(self, world: _Fleet, r: NodeRecord, at: str) -> list[str]:
        domain = r.zone or NO_DOMAIN
        lines = [f"{at}: {r.node} started while paused"] if world.paused else []
        halting = [g.rec.node for g in world.nodes.values() if g.rec.node != r.node and self._halts(world, g.rec)]
        if halting:
            lines.append(f"{at}: {r.node} started while the rollout was halted by {halting}")
        elsewhere = [
            f"{g.rec.node} ({g.rec.zone or NO_DOMAIN})"
            for g in world.nodes.values()
            if g.rec.state in {s.value for s in IN_PROGRESS} and (g.rec.zone or NO_DOMAIN) != domain
        ]
        if elsewhere:
            lines.append(f"{at}: {r.node} (domain {domain}) started while {elsewhere} of other domains ran")
        return lines + self._moved_on(world, world.status_domain, domain, f"{at}: {r.node} started")

    def _moved_on(self, world: _Fleet, current: str | None, domain: str, what: str) -> list[str]:
        """The rollout stays on the status's current domain until it is finished, then takes the first
        unfinished domain in the order in effect."""
        if domain == current:
            return []
        sequence = _sequence(world)
        unfinished = [d for d in sequence if not self._finished(world, d, sequence)]
        if current in unfinished:
            return [f"{what} in domain {domain} while the current domain {current} was unfinished"]
        if unfinished and domain != unfinished[0]:
            return [f"{what} in domain {domain}; the order {sequence} has unfinished domain {unfinished[0]} first"]
        return []

    @staticmethod
    def _finished(world: _Fleet, domain: str, sequence: list[str]) -> bool:
        go_on = world.policy.on_node_failure is OnNodeFailure.CONTINUE and domain != sequence[0]
        return all(
            g.rec.state == State.DONE.value
            or (g.rec.state == State.FAILED.value and (go_on or _acknowledged(world, g.rec)))
            for g in world.nodes.values()
            if (g.rec.zone or NO_DOMAIN) == domain and _readable(g.rec)
        )

    @staticmethod
    def _halts(world: _Fleet, r: NodeRecord) -> bool:
        if r.state in {s.value for s in IN_PROGRESS}:
            return r.blocked
        if r.state != State.FAILED.value or _acknowledged(world, r):
            return False
        sequence = _sequence(world)
        canary = sequence[0] if sequence else None
        return world.policy.on_node_failure is OnNodeFailure.HALT or (r.zone or NO_DOMAIN) == canary

    @staticmethod
    def _unseen(history: list[NodeRecord | Mark], index: int, lag: float, passes_after_restore: int) -> set[int]:
        """The disturbances the pass behind `history[index]` could not have seen: a person's writes
        since its pass began (less `lag`), and restores fewer than `passes_after_restore` + 1 passes ago."""
        passes = [e for e in history[:index] if isinstance(e, Mark) and e.kind == "pass"]
        since = passes[-1].time - lag if passes else float("-inf")
        unseen: set[int] = set()
        for i, e in enumerate(history[:index]):
            if isinstance(e, NodeRecord | Mark) and e.by not in (None, RESTORE) and e.time >= since:
                unseen.add(e.seq)  # a person's node write, or their pause or acknowledgement
            elif isinstance(e, Mark) and e.kind == RESTORE:
                later = sum(1 for p in passes if p.seq > e.seq)
                if later <= passes_after_restore:
                    group = itertools.takewhile(lambda x: x.by == RESTORE, history[i:index])
                    unseen.update(x.seq for x in group)
        return unseen


def _acknowledged(world: _Fleet, r: NodeRecord) -> bool:
    """This failure of the node (its failed-at, as text) is the one an operator acknowledged."""
    return r.node in world.acknowledged and world.acknowledged[r.node] == r.annotations.get(FAILED_AT)


def _readable(r: NodeRecord) -> bool:
    """A node with an unreadable state label (`bogus`) is not managed: it is in no domain, and only
    holds its share of maxUnavailable."""
    return r.state is None or r.state in {s.value for s in State}


def _unavailable(r: NodeRecord) -> bool:
    return r.unschedulable or r.state in {s.value for s in IN_PROGRESS} or r.state == State.FAILED.value


def _sequence(world: _Fleet) -> list[str]:
    """Domains present, in the order of the policy in effect (see `domain_order`)."""
    return domain_order({f.rec.zone or NO_DOMAIN for f in world.nodes.values() if _readable(f.rec)}, world.policy)


@dataclass
class _Facts:
    """What the audit knows of one node: its last record, and who cordoned it."""

    rec: NodeRecord
    foreign: bool = False  # someone else's cordon is in effect
    foreign_seq: int = -1
    ours_seq: int = -1  # upgrader's last cordon of the node
    start_seq: int | None = None  # the first start of its current cycle
    in_cycle: bool = False
    record_lost: bool = False  # a person removed the cordon record while it stayed cordoned


@dataclass
class _Fleet:
    """The world as the audit replays it."""

    policy: Policy
    nodes: dict[str, _Facts] = field(default_factory=dict)
    status_domain: str | None = None
    paused: bool = False
    acknowledged: dict[str, str] = field(default_factory=dict)  # node -> the failed-at acknowledged
    saved: dict[int, tuple[dict[str, _Facts], str | None]] = field(default_factory=dict)


def _for_pool(policy: Policy, pool: str | None) -> Policy:
    """The policy a pool's nodes start under (the pool `default`, or none: the policy itself)."""
    if pool is None:
        return policy
    return policy.for_pool(next((p for p in policy.pools if p.name == pool), None))
