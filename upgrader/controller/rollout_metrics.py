"""The rollout's gauges: built at scrape time from the last status this replica computed as the leader.

Two replicas run; only the leader's view of the rollout is true. So these gauges are exported only
while this replica holds the Lease (its last acknowledged renewal has not expired: no other replica
can have taken it) and has computed a status since it last led. A replica that loses the Lease
stops exporting them at its next scrape, before another can take over, so Prometheus marks its
series stale instead of keeping its last view. Per-process series (passes, requests, leader) are
in `metrics.Metrics` and exported by every replica.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from upgrader.core.model.states import IN_PROGRESS, STATE_COUNT_KEYS, State
from upgrader.core.model.timefmt import parse_or_none
from upgrader.core.report.document import PoolStatus, RolloutStatus
from upgrader.core.report.entries import GateReport, WindowReport
from upgrader.core.report.kinds import BlockKind, FailureKind, HoldKind, Phase, WaitReason

# One series each, always exported (0 when no node has that kind): core/report/kinds.py holds the kinds.
BLOCK_REASONS = tuple(k.label for k in BlockKind)
FAILURE_REASONS = tuple(k.label for k in FailureKind)
HOLD_REASONS = tuple(k.label for k in HoldKind)
WAIT_REASONS = tuple(r.value for r in WaitReason)  # the status's own words: `waiting_on.reason`
PHASES = tuple(p.value for p in Phase)
# name: (help, labels)
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "upgrader_nodes": ("Managed GPU nodes per upgrade state (the leader's view).", ("state",)),
    "upgrader_domain_nodes": ("Managed GPU nodes per failure domain and upgrade state.", ("domain", "state")),
    "upgrader_rollout_phase": ("1 for the rollout's current phase, 0 for the others.", ("phase",)),
    "upgrader_rollout_halted": ("1 while the rollout is halted: no new node starts.", ()),
    "upgrader_interlocks": ("What stands between upgrader and the drivers (the GPU Operator's upgrade controller on, "
                            "a driver DaemonSet not OnDelete): while above 0, no node is written.", ()),
    "upgrader_rollout_waiting": ("1 for what no node starting waits on now (status waiting_on.reason), 0 for the "
                                 "other reasons.", ("reason",)),
    "upgrader_blocked_nodes": ("Nodes blocked right now, by reason.", ("reason",)),
    "upgrader_failed_nodes": ("Nodes in upgrade-failed, by reason.", ("reason",)),
    "upgrader_held_nodes": ("Nodes the preflight holds at upgrade-required (a blocking plan finding), by reason.",
                            ("reason",)),
    "upgrader_node_blocked_info": ("1 per node that is blocked, held or failed now (node, state, reason kind).",
                                   ("node", "state", "reason")),
    "upgrader_state_oldest_seconds": ("Seconds the longest-waiting node has been in each in-progress state.",
                                      ("state",)),
    "upgrader_maintenance_window_open": ("1 while a maintenance window is open (or the policy has none).", ()),
    "upgrader_maintenance_window_next_open_timestamp_seconds": (
        "While no window is open: when the next opens (0 when one is open, none is set or none opens).", ()),
    "upgrader_maintenance_window_closes_timestamp_seconds": (
        "While a window is open: when the open stretch ends (0 otherwise, or when not within 8 days).", ()),
    "upgrader_alert_gate_open": (
        "1 while the alert gate lets nodes start (or the policy has none); 0 while a matching alert fires "
        "or Prometheus cannot say.", ()),
    "upgrader_alert_gate_firing_alerts": ("Matching alerts firing in Prometheus as of the last pass.", ()),
    "upgrader_rollout_domain_info": ("1 for the failure domain being upgraded (position current) and the one "
                                     "after it (position next).", ("position", "domain")),
    "upgrader_rollout_eta_timestamp_seconds": (
        "When the rollout should be done, from the median observed per-node duration (0: no estimate yet).", ()),
    "upgrader_pool_nodes": ("Managed GPU nodes per pool (policy pools) and upgrade state.", ("pool", "state")),
    "upgrader_pool_phase": ("1 for each pool's phase, 0 for its other phases.", ("pool", "phase")),
    "upgrader_pool_waiting": ("1 for what no node of the pool starting waits on now (pools[].waiting_on.reason), "
                              "0 for the other reasons.", ("pool", "reason")),
    "upgrader_pool_domain_info": ("1 for the failure domain each pool is on (position current) and the one after "
                                  "it (position next).", ("pool", "position", "domain")),
    "upgrader_pool_eta_timestamp_seconds": ("When the pool should be done (0: no estimate yet).", ("pool",)),
    "upgrader_target_driver_info": ("1 per driver DaemonSet: the driver version and revision its nodes are "
                                    "upgraded to.", ("daemonset", "driver_version", "revision")),
}


def reason_label(kind: str) -> str:
    return kind.replace("-", "_")


class RolloutCollector(Collector):
    def __init__(self, leading: Callable[[], bool], clock: Callable[[], float] = time.time) -> None:
        self.leading = leading  # read at every scrape: the Lease may lapse between passes
        self.clock = clock
        self._status: RolloutStatus | None = None  # replaced whole, never changed in place

    def update(self, status: RolloutStatus) -> None:
        self._status = status

    def drop(self) -> None:
        """This replica does not lead (any more): it has no view of the rollout to export."""
        self._status = None

    def exporting(self) -> bool:
        return self._status is not None and self.leading()

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(name, text, labels=list(labels)) for name, (text, labels) in GAUGES.items()]

    def collect(self) -> Iterable[Metric]:
        status = self._status
        if status is None or not self.leading():
            return []
        return list(families(status, self.clock()))


def families(status: RolloutStatus, now: float) -> Iterable[Metric]:
    """Every gauge from one status, so one scrape never mixes two passes."""
    family = {name: GaugeMetricFamily(name, text, labels=list(labels)) for name, (text, labels) in GAUGES.items()}
    for key in STATE_COUNT_KEYS:
        family["upgrader_nodes"].add_metric([key], status.nodes_by_state.get(key, 0))
    for domain in status.domains:
        for key in STATE_COUNT_KEYS:
            family["upgrader_domain_nodes"].add_metric([domain.name, key], domain.by_state.get(key, 0))
    for phase in PHASES:
        family["upgrader_rollout_phase"].add_metric([phase], 1 if status.phase == phase else 0)
    family["upgrader_rollout_halted"].add_metric([], 1 if status.phase is Phase.HALTED else 0)
    family["upgrader_interlocks"].add_metric([], len(status.interlocks))
    waiting = status.waiting_on.reason if status.waiting_on else None
    for reason in WAIT_REASONS:
        family["upgrader_rollout_waiting"].add_metric([reason], 1 if waiting == reason else 0)
    blocked, failed, held = status.blocked, status.failed, status.held
    for reason in BLOCK_REASONS:
        family["upgrader_blocked_nodes"].add_metric([reason], sum(reason_label(b.kind) == reason for b in blocked))
    for reason in FAILURE_REASONS:
        family["upgrader_failed_nodes"].add_metric([reason], sum(reason_label(f.kind) == reason for f in failed))
    for reason in HOLD_REASONS:
        family["upgrader_held_nodes"].add_metric([reason], sum(reason_label(h.kind) == reason for h in held))
    info = {(b.node, b.state, reason_label(b.kind)) for b in blocked}
    info |= {(h.node, State.UPGRADE_REQUIRED.value, reason_label(h.kind)) for h in held}
    info |= {(f.node, State.FAILED.value, reason_label(f.kind)) for f in failed}
    for labels in sorted(info):
        family["upgrader_node_blocked_info"].add_metric(list(labels), 1)
    window = status.maintenance_window or WindowReport(True)  # none configured: always open
    family["upgrader_maintenance_window_open"].add_metric([], 1 if window.open else 0)
    for at, name in ((window.next_open, "next_open"), (window.closes_at, "closes")):
        family[f"upgrader_maintenance_window_{name}_timestamp_seconds"].add_metric([], parse_or_none(at) or 0)
    gate = status.alert_gate or GateReport(True, "")  # none configured: always open
    family["upgrader_alert_gate_open"].add_metric([], 1 if gate.open else 0)
    family["upgrader_alert_gate_firing_alerts"].add_metric([], len(gate.firing))
    for position, named in (("current", status.current_domain), ("next", status.next_domain)):
        if named:
            family["upgrader_rollout_domain_info"].add_metric([position, named], 1)
    for target in status.targets:
        family["upgrader_target_driver_info"].add_metric([target.daemonset, target.driver_version, target.revision], 1)
    eta = parse_or_none(status.eta.at) if status.eta else None
    family["upgrader_rollout_eta_timestamp_seconds"].add_metric([], eta or 0)
    for pool in status.pools or ():
        pool_families(family, pool)
    ages = oldest(status, now)
    for state in sorted(IN_PROGRESS, key=list(State).index):
        family["upgrader_state_oldest_seconds"].add_metric([state.value], round(ages.get(state.value, 0.0), 3))
    return family.values()


def oldest(status: RolloutStatus, now: float) -> dict[str, float]:
    """Seconds the longest-waiting node has been in each state, as of the scrape."""
    ages: dict[str, float] = {}
    for entry in status.in_progress:
        since = parse_or_none(entry.since)
        if since is not None:
            ages[entry.state] = max(ages.get(entry.state, 0.0), now - since)
    return ages


def pool_families(family: dict[str, GaugeMetricFamily], pool: PoolStatus) -> None:
    """A pool's series (policy pools): its nodes per state, phase, wait, domains and ETA."""
    name = pool.name
    for key in STATE_COUNT_KEYS:
        family["upgrader_pool_nodes"].add_metric([name, key], pool.nodes_by_state.get(key, 0))
    for phase in PHASES:
        family["upgrader_pool_phase"].add_metric([name, phase], 1 if pool.phase == phase else 0)
    waiting = pool.waiting_on.reason if pool.waiting_on else None
    for reason in WAIT_REASONS:
        family["upgrader_pool_waiting"].add_metric([name, reason], 1 if waiting == reason else 0)
    for position, domain in (("current", pool.current_domain), ("next", pool.next_domain)):
        if domain:
            family["upgrader_pool_domain_info"].add_metric([name, position, domain], 1)
    eta = parse_or_none(pool.eta.at) if pool.eta else None
    family["upgrader_pool_eta_timestamp_seconds"].add_metric([name], eta or 0)
