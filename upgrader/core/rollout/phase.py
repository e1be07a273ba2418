"""The rollout's phase (Paused, Halted, Done or Running) and why no new node may start: judged once a
pass, before the starts, which a Paused or Halted rollout does not make, then reported by the status
(core/rollout/status.py) after them. The starts cannot change it: a start moves a node from
upgrade-required to cordon-required, both still to do, and neither blocks nor fails one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    FAILED_AT,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    IN_PROGRESS,
    UNLABELLED,
    State,
)
from upgrader.core.model.views import Control, NodeView, Snapshot
from upgrader.core.policy.policy import OnNodeFailure, Policy
from upgrader.core.report.document import LastStatus
from upgrader.core.report.entries import NodeBlocked, NodeFailed
from upgrader.core.report.kinds import Phase, block_runbook
from upgrader.core.rollout.census import census
from upgrader.core.rollout.schedule import canary_domain, domain_of

STOPPED = (Phase.HALTED, Phase.PAUSED)  # no node starts


@dataclass(frozen=True)
class PhaseVerdict:
    """What the pass judged before its starts, and its status reports after them."""

    phase: Phase
    halt_reason: str | None = None  # why no new node may start (kept while Paused over a halt)

    @property
    def may_start(self) -> bool:
        return self.phase not in STOPPED


def blocked_nodes(snapshot: Snapshot, managed: list[str]) -> list[NodeBlocked]:
    out = []
    for name in managed:
        node = snapshot.nodes[name]
        kind = node.annotations.get(BLOCKED_KIND)
        if kind and node.state in IN_PROGRESS:  # only a node being worked on can be blocked
            out.append(NodeBlocked(name, node.state.value, kind, node.annotations.get(BLOCKED_REASON, ""),
                                   node.annotations.get(BLOCKED_SINCE, ""), block_runbook(kind)))
    return out


def failed_nodes(snapshot: Snapshot, managed: list[str], acknowledged: set[str]) -> list[NodeFailed]:
    out = []
    for name in managed:
        node = snapshot.nodes[name]
        if node.state is State.FAILED:
            kind = node.annotations.get(FAILED_KIND, "failed")
            out.append(
                NodeFailed(
                    name, kind, node.annotations.get(FAILED_REASON, "(no reason recorded)"),
                    node.annotations.get(FAILED_AT, ""), name in acknowledged,
                    node.annotations.get(FAILED_STATE, ""),  # the state it failed in
                    block_runbook(kind),
                )
            )
    return out


def halt_reason(
    snapshot: Snapshot, policy: Policy, managed: list[str], acknowledged: set[str], watched: list[str] | None = None
) -> str | None:
    """Why no new node may start, or None. An interlock halts first (core/fleet/interlocks.py); then blocks;
    then unacknowledged failures in the canary domain, and anywhere under onNodeFailure: halt.
    `watched`: the managed nodes that can be blocked or failed (core/rollout/census.py), when known."""
    if snapshot.interlocks:
        others = len(snapshot.interlocks) - 1
        more = f" (and {others} more: `upgrader status -o json` lists them)" if others else ""
        return snapshot.interlocks[0].text + more
    blocked = blocked_nodes(snapshot, managed if watched is None else watched)
    if blocked:
        b = blocked[0]
        more = f" (and {len(blocked) - 1} more blocked)" if len(blocked) > 1 else ""
        return f"{b.node} blocked in {b.state} since {b.since}: {b.reason}{more}; see {b.runbook}"
    failures = failed_nodes(snapshot, managed if watched is None else watched, acknowledged)
    if not failures:
        return None
    canary = canary_domain([snapshot.nodes[n] for n in managed], policy)
    for failure in failures:
        if failure.acknowledged:
            continue
        in_canary = domain_of(snapshot.nodes[failure.node], policy) == canary
        if in_canary or policy.on_node_failure is OnNodeFailure.HALT:
            where = (
                "canary domain " + str(canary)
                if in_canary
                else "domain " + domain_of(snapshot.nodes[failure.node], policy)
            )
            state = f" in {failure.state}" if failure.state else ""
            return (
                f"{failure.node} upgrade-failed{state} ({where}) at {failure.since}: {failure.reason}; "
                f"see {failure.runbook}"
            )
    return None


class Members(Protocol):
    """The nodes a status is of: the managed ones, and the driver nodes left alone (a fleet/managed.py
    `Fleet`, or a pool's `Share`)."""

    @property
    def managed(self) -> list[NodeView]: ...
    @property
    def skipped(self) -> list[str]: ...
    @property
    def invalid(self) -> list[tuple[str, str]]: ...


@dataclass(frozen=True)
class Scope:
    """Whose status: `members`, the whole fleet's (`pool` None) or a pool's (core/fleet/pool_shares.py).
    A pool's is judged against its entry in the last status, and its census kept apart (census.py)."""

    members: Members
    pool: str | None = None

    def previous(self, control: Control) -> LastStatus | None:
        """The last status written of these members."""
        whole = control.previous
        return whole if self.pool is None or whole is None else whole.pool(self.pool)

    @property
    def slot(self) -> str:
        return "census" if self.pool is None else f"census:{self.pool}"


def judge(snapshot: Snapshot, policy: Policy, scope: Scope, acknowledged: set[str]) -> PhaseVerdict:
    """The phase of `scope`'s nodes: Paused (by a person, or autoUpgrade false), else Halted (an
    interlock, a block or an unsettled failure: `halt_reason`), else Done when no node is left to
    upgrade or label, else Running."""
    managed = [n.name for n in scope.members.managed]
    counted = census(snapshot, policy.failure_domains, managed, scope.slot)
    halt = halt_reason(snapshot, policy, managed, acknowledged, counted.watched)
    by_state = counted.by_state
    pending = by_state[State.UPGRADE_REQUIRED.value] + sum(by_state[s.value] for s in IN_PROGRESS)
    if snapshot.control.paused or not policy.auto_upgrade:
        return PhaseVerdict(Phase.PAUSED, halt)
    if halt:
        return PhaseVerdict(Phase.HALTED, halt)
    if pending == 0 and by_state[UNLABELLED] == 0:
        return PhaseVerdict(Phase.DONE)  # failures that should stop the rollout halt it above
    return PhaseVerdict(Phase.RUNNING)
