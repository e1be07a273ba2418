"""Rollout invariants, checked against what the emulator saw happen.

A `RolloutRecorder` hooks the store and keeps every node change (state label, unschedulable,
blocked/failed annotations, zone) in commit order; `check` replays it against the policy's promises
and the request log. Used by the end-to-end tests, the campaigns and the benchmarks alike.

`check_disturbed` judges rollouts that people and failures disturb meanwhile (hand edits, zone
relabels, restarts with another domain order, an API server restored from a backup): whoever drives
them tells the recorder (`by_hand`, `policy_in_effect`, `backup_taken`, `restoring`, `pass_begins`).

The recording is in recording.py, the audit of a disturbed rollout in disturbed_audit.py; here the plain
`check`, and the replica checks on the request log.
"""

from __future__ import annotations

import itertools
import math

from upgrader.core.model.states import IN_PROGRESS, STATE_SINCE, State
from upgrader.core.model.timefmt import parse_or_none as parse_rfc3339
from upgrader.core.policy.policy import Policy
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.proving.disturbed_audit import DisturbedAuditor
from upgrader.sim.proving.recording import NodeRecord


class RolloutRecorder(DisturbedAuditor):
    """Records a rollout (HistoryRecorder) and judges it: `check` here, `check_disturbed` (DisturbedAuditor)."""

    # ----- the invariants -----------------------------------------------------------------------

    def check(
        self,
        policy: Policy,
        domain_of: dict[str, str],
        canary: str | None,
        domain_order: list[str] | None = None,
        failures_acknowledged: bool = False,
        pooled: bool = False,
    ) -> list[str]:
        """Every broken promise, as one line each; empty when the rollout kept them all.

        `failures_acknowledged`: an operator acknowledged a failed node (`upgrader acknowledge`), so starts
        after that failure are allowed. `pooled`: `domain_of` is one pool's nodes and `policy` the pool's
        (Policy.for_pool); a halt is the pool's own (a block or failure elsewhere does not halt it).
        """
        violations: list[str] = []
        managed = set(domain_of)
        total = len(managed)
        max_unavailable = policy.max_unavailable_nodes(total)
        state: dict[str, str | None] = {}
        cordoned: dict[str, bool] = {}
        for r in self.records:
            if r.node not in managed:
                continue
            state[r.node], cordoned[r.node] = r.state, r.unschedulable
            in_progress = sum(1 for s in state.values() if s in {x.value for x in IN_PROGRESS})
            if policy.max_parallel_upgrades and in_progress > policy.max_parallel_upgrades:
                violations.append(
                    f"rv {r.rv}: {in_progress} nodes in progress > maxParallelUpgrades "
                    f"{policy.max_parallel_upgrades}"
                )
            ours = sum(
                1
                for n in state
                if n not in self.initially_cordoned
                and (
                    cordoned.get(n)
                    or state[n] in {x.value for x in IN_PROGRESS}
                    or state[n] == State.FAILED.value
                )
            )
            if ours > max_unavailable:
                violations.append(
                    f"rv {r.rv}: {ours} nodes unavailable because of us > maxUnavailable {max_unavailable}"
                )
            if r.node in self.initially_cordoned and not r.unschedulable:
                violations.append(f"rv {r.rv}: {r.node} was cordoned by someone else and got uncordoned")
        violations += self._domain_order(domain_of, canary, domain_order)
        violations += self._canary_nodes_first(policy, domain_of, canary)
        within = managed if pooled else None
        halt = self.first_halt(within)
        if halt is not None:
            late = [s for s in self.starts() if s.rv > halt.rv and (within is None or s.node in within)]
            # A node blocked only transiently (its block cleared) does not halt for good; only
            # starts while some node is still blocked or failed break the promise.
            for start in late:
                if self._halted_at(start.rv, ignore_failed=failures_acknowledged, within=within):
                    violations.append(f"rv {start.rv}: {start.node} started while the rollout was halted")
        for node, final in self.final_states().items():
            if (
                node in managed
                and final == State.DONE.value
                and cordoned.get(node)
                and node not in self.initially_cordoned
            ):
                violations.append(f"{node} finished upgrade-done but was left cordoned")
        violations += self._pdb_bypass()
        return violations

    def _halted_at(self, rv: int, ignore_failed: bool = False, within: set[str] | None = None) -> bool:
        current: dict[str, NodeRecord] = {}
        for r in self.records:
            if r.rv >= rv:
                break
            if within is None or r.node in within:
                current[r.node] = r
        return any(
            r.blocked or (r.state == State.FAILED.value and not ignore_failed) for r in current.values()
        )

    def _domain_order(
        self, domain_of: dict[str, str], canary: str | None, order: list[str] | None
    ) -> list[str]:
        """Every domain starts only after the previous one (canary first) is entirely done."""
        sequence = order or ([canary] if canary else [])
        violations = []
        done_rv: dict[str, int] = {}  # when each node last became upgrade-done (not a later write on it)
        state: dict[str, str | None] = {}
        for r in self.records:
            if r.state == State.DONE.value and r.node in domain_of and state.get(r.node) != State.DONE.value:
                done_rv[r.node] = r.rv
            state[r.node] = r.state
        for i, domain in enumerate(sequence[:-1]):
            members = [n for n, d in domain_of.items() if d == domain]
            if not members or not all(n in done_rv for n in members):
                continue
            finished = max(done_rv[n] for n in members)
            later = set(sequence[i + 1 :]) if order else {d for d in domain_of.values() if d != domain}
            early = [s for s in self.starts() if domain_of.get(s.node) in later and s.rv < finished]
            violations += [
                f"rv {s.rv}: {s.node} (domain {domain_of[s.node]}) started before domain {domain} "
                f"finished (rv {finished})"
                for s in early
            ]
        return violations


    def _canary_nodes_first(self, policy: Policy, domain_of: dict[str, str], canary: str | None) -> list[str]:
        """failureDomains.canaryNodes: the canary domain's first nodes to start (as many as it says) are
        done before any other node of the domain starts, and soakSeconds before it."""
        members = [n for n, d in domain_of.items() if d == canary]
        count = policy.failure_domains.canary_count(len(members))
        starts = [s for s in self.starts() if s.node in members]
        if count is None or len(starts) <= count:
            return []
        first = {s.node for s in starts[:count]}
        done: dict[str, NodeRecord] = {}
        for r in self.records:
            if r.node in first and r.state == State.DONE.value:
                done.setdefault(r.node, r)
        soak = policy.failure_domains.soak_seconds
        violations = []
        for s in starts[count:]:
            if s.node in first:
                continue  # a first node started again (a state label set back by hand)
            late = [n for n in first if n not in done or done[n].rv > s.rv]
            if late:
                violations.append(f"rv {s.rv}: {s.node} (canary domain {canary}) started before its first "
                                  f"{count} nodes were done: {', '.join(sorted(late))} not yet")
            # The soak counts from the nodes' state-since as stamped at upgrade-done (RFC 3339, whole
            # seconds, the deciding pass's clock: docs/policy.md#canary-nodes).
            elif s.time < max(_stamped(done[n]) for n in first) + soak:
                violations.append(f"rv {s.rv}: {s.node} (canary domain {canary}) started within the "
                                  f"{soak}s soak after its first {count} nodes")
        return violations


def _stamped(record: NodeRecord) -> float:
    """When a record's state began by its state-since stamp; the record's own time, floored, without one."""
    stamp = parse_rfc3339(record.annotations.get(STATE_SINCE))
    return stamp if stamp is not None else math.floor(record.time)


def writer_switches(cluster: EmulatedCluster) -> int:
    """How often the identity (User-Agent) writing nodes and pods changed hands, in request order."""
    writers = [r.user_agent for r in cluster.requests
               if r.verb in ("create", "patch", "update", "delete") and r.resource in ("nodes", "pods")]
    return sum(1 for a, b in itertools.pairwise(writers) if a != b)


def lease_handovers(cluster: EmulatedCluster, namespace: str = "gpu-operator",
                    name: str = "gpu-driver-upgrader") -> int:
    lease = cluster.get("leases", name, namespace, "coordination.k8s.io") or {}
    return int((lease.get("spec") or {}).get("leaseTransitions") or 0)
