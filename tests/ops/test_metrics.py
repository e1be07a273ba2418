"""What /metrics exposes: the rollout only from the leader, every known counter series from zero."""

from __future__ import annotations

import itertools
from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families
from transitions import MachineError

from upgrader import __version__
from upgrader.controller.metrics import OUTCOMES, PASS_RESULTS, VERBS, Metrics, transition_pairs
from upgrader.controller.rollout_metrics import GAUGES, RolloutCollector
from upgrader.core.model.states import STATE_COUNT_KEYS, UNLABELLED, State
from upgrader.core.node.machine import FLAGS, TRIGGERS, fire
from upgrader.core.report.document import PoolStatus, RolloutStatus
from upgrader.core.report.entries import (
    DomainCount,
    Eta,
    GateReport,
    NodeBlocked,
    NodeInProgress,
    Target,
    WaitingOn,
    WindowReport,
)
from upgrader.core.report.kinds import Phase, WaitReason

Samples = dict[str, list[tuple[dict[str, str], float]]]
DONE_TWO = {"upgrade-done": 2, "pod-deletion-required": 1}
STATUS = RolloutStatus(
    Phase.HALTED,
    "halted: gpu-a-01 blocked in pod-deletion-required",
    nodes_by_state={"upgrade-done": 2, "pod-deletion-required": 1, "upgrade-required": 3},
    blocked=(NodeBlocked("gpu-a-01", "pod-deletion-required", "pdb", "", "", "runbooks/pdb-blocked-eviction.md"),),
    domains=(DomainCount("zone-a", True, 3, 2, 1, 0, DONE_TWO),),
    in_progress=(NodeInProgress("gpu-a-01", "pod-deletion-required", "2026-11-30T10:00:00Z"),),
    current_domain="zone-a",
    next_domain="zone-b",
    targets=(Target("gpu-operator/nvidia-driver", "550.90.07", "7d9c"),),
    pools=(
        PoolStatus("training", "nodeSelector pool=training", Phase.HALTED, "halted", nodes_by_state=DONE_TWO,
                   current_domain="zone-a", next_domain="zone-b"),
        PoolStatus("inference", "nodeSelector pool=inference", Phase.RUNNING, "awaiting promotion",
                   nodes_by_state={"upgrade-required": 3}, current_domain="zone-b",
                   waiting_on=WaitingOn(WaitReason.AWAITING_PROMOTION, "zone-b", (), 0),
                   eta=Eta("2026-11-30T11:00:00Z", 600, 2, 3)),
    ),
)


def scrape(metrics: Metrics) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def rollout_names(samples: Samples) -> set[str]:
    return set(samples) & set(GAUGES)


def test_a_replica_that_never_led_exports_no_rollout_gauges_but_its_own_series() -> None:
    samples = scrape(Metrics(leading=lambda: False))
    assert rollout_names(samples) == set()
    assert samples["upgrader_leader"] == [({}, 0.0)]
    assert "upgrader_reconcile_total" in samples and "upgrader_api_requests_total" in samples


def test_the_leader_exports_its_last_status_whole() -> None:
    metrics = Metrics(leading=lambda: True)
    metrics.rollout.update(STATUS)
    samples = scrape(metrics)
    assert rollout_names(samples) == set(GAUGES)
    nodes = {labels["state"]: value for labels, value in samples["upgrader_nodes"]}
    assert set(nodes) == set(STATE_COUNT_KEYS) and sum(nodes.values()) == 6
    assert [labels["phase"] for labels, v in samples["upgrader_rollout_phase"] if v == 1] == ["Halted"]
    assert samples["upgrader_node_blocked_info"] == [
        ({"node": "gpu-a-01", "state": "pod-deletion-required", "reason": "pdb"}, 1.0)
    ]
    assert samples["upgrader_leader"] == [({}, 1.0)]
    assert sorted(samples["upgrader_rollout_domain_info"], key=str) == [
        ({"position": "current", "domain": "zone-a"}, 1.0), ({"position": "next", "domain": "zone-b"}, 1.0)
    ]
    assert samples["upgrader_target_driver_info"] == [
        ({"daemonset": "gpu-operator/nvidia-driver", "driver_version": "550.90.07", "revision": "7d9c"}, 1.0)
    ]
    assert samples["upgrader_build_info"] == [({"version": __version__}, 1.0)]
    pools = {(labels["pool"], labels["state"]): v for labels, v in samples["upgrader_pool_nodes"] if v}
    assert pools == {("training", "upgrade-done"): 2, ("training", "pod-deletion-required"): 1,
                     ("inference", "upgrade-required"): 3}
    assert sorted((lb["pool"], lb["phase"]) for lb, v in samples["upgrader_pool_phase"] if v) == [
        ("inference", "Running"), ("training", "Halted")]
    assert [(lb["pool"], lb["reason"]) for lb, v in samples["upgrader_pool_waiting"] if v] == [
        ("inference", "awaiting-promotion")]
    assert sorted((lb["pool"], lb["position"], lb["domain"]) for lb, _ in samples["upgrader_pool_domain_info"]) == [
        ("inference", "current", "zone-b"), ("training", "current", "zone-a"), ("training", "next", "zone-b")]
    assert sorted(samples["upgrader_pool_eta_timestamp_seconds"], key=str) == [
        ({"pool": "inference"}, 1796036400.0), ({"pool": "training"}, 0.0)]


def test_a_lease_that_lapses_between_passes_stops_the_export_at_the_next_scrape() -> None:
    holds = [True]
    metrics = Metrics(leading=lambda: holds[0])
    metrics.rollout.update(STATUS)
    assert rollout_names(scrape(metrics)) == set(GAUGES)
    holds[0] = False  # no pass ran: the scrape itself asks
    samples = scrape(metrics)
    assert rollout_names(samples) == set() and samples["upgrader_leader"] == [({}, 0.0)]


def test_a_pass_without_the_lease_forgets_the_view_so_a_new_term_starts_from_its_own_status() -> None:
    metrics = Metrics(leading=lambda: True)
    metrics.rollout.update(STATUS)
    metrics.observe_pass("not_leader", 0.01, leader=False)
    assert rollout_names(scrape(metrics)) == set(), "leading again, but no status of this term yet"
    metrics.rollout.update(replace(STATUS, phase=Phase.DONE, blocked=()))
    samples = scrape(metrics)
    assert [labels["phase"] for labels, v in samples["upgrader_rollout_phase"] if v == 1] == ["Done"]
    assert "upgrader_node_blocked_info" not in samples


def test_the_oldest_wait_is_as_of_the_scrape() -> None:
    since = 1796032800.0  # 2026-11-30T10:00:00Z
    now = [since + 60]
    collector = RolloutCollector(lambda: True, clock=lambda: now[0])
    collector.update(STATUS)

    def oldest() -> float:
        family = next(f for f in collector.collect() if f.name == "upgrader_state_oldest_seconds")
        return next(s.value for s in family.samples if s.labels["state"] == "pod-deletion-required")

    assert oldest() == 60.0
    now[0] += 3540
    assert oldest() == 3600.0, "no pass in between: the wait still grows, so the stuck alert fires on time"


def test_every_counter_series_known_up_front_exists_at_zero() -> None:
    samples = scrape(Metrics())
    transitions = {(lbl["from_state"], lbl["to_state"]): v for lbl, v in samples["upgrader_state_transitions_total"]}
    assert set(transitions) == set(transition_pairs()) and set(transitions.values()) == {0.0}
    assert {(UNLABELLED, "upgrade-required"), (UNLABELLED, "upgrade-done")} <= set(transitions)
    durations = {lbl["state"]: v for lbl, v in samples["upgrader_state_duration_seconds_count"]}
    assert durations == {s.value: 0.0 for s in State}
    assert {lbl["result"]: v for lbl, v in samples["upgrader_reconcile_total"]} == dict.fromkeys(PASS_RESULTS, 0.0)
    requests = {(lbl["verb"], lbl["outcome"]) for lbl, v in samples["upgrader_api_requests_total"] if v == 0}
    assert requests == set(itertools.product(VERBS, OUTCOMES))
    assert samples["upgrader_reconcile_errors_total"] == [({}, 0.0)]


def test_every_label_write_the_machine_can_make_has_its_series_from_start_up() -> None:
    pairs = set(transition_pairs())
    fired = set()
    for state, trigger in itertools.product(State, TRIGGERS):
        for flags in itertools.chain.from_iterable(itertools.combinations(FLAGS, n) for n in range(len(FLAGS) + 1)):
            try:
                t = fire("n", state, trigger, flags)
            except MachineError:
                continue
            fired.add((state.value, t.target.value))
    assert fired == pairs - {(UNLABELLED, "upgrade-required"), (UNLABELLED, "upgrade-done")}


def test_a_first_labelling_is_counted_without_a_time_in_state() -> None:
    metrics = Metrics()
    metrics.observe_transition(UNLABELLED, "upgrade-required", None)
    samples = scrape(metrics)
    counted = {(lbl["from_state"], lbl["to_state"]): v for lbl, v in samples["upgrader_state_transitions_total"]}
    assert counted[(UNLABELLED, "upgrade-required")] == 1.0
    assert sum(v for _, v in samples["upgrader_state_duration_seconds_count"]) == 0


def window_samples(window: WindowReport | None) -> dict[str, float]:
    metrics = Metrics(leading=lambda: True)
    metrics.rollout.update(replace(STATUS, phase=Phase.RUNNING, maintenance_window=window))
    samples = scrape(metrics)
    return {name: samples[name][0][1] for name in samples if name.startswith("upgrader_maintenance_window_")}


def test_the_maintenance_window_gauges_say_open_or_when_the_next_opens() -> None:
    closed = WindowReport(False, "nightly", closes_at=None, next_open="2026-11-30T22:00:00Z")
    assert window_samples(closed) == {
        "upgrader_maintenance_window_open": 0.0,
        "upgrader_maintenance_window_next_open_timestamp_seconds": 1_796_076_000.0,
        "upgrader_maintenance_window_closes_timestamp_seconds": 0.0,
    }
    opened = WindowReport(True, "nightly", closes_at="2026-11-30T22:00:00Z", next_open=None)
    assert window_samples(opened) == {
        "upgrader_maintenance_window_open": 1.0,
        "upgrader_maintenance_window_next_open_timestamp_seconds": 0.0,
        "upgrader_maintenance_window_closes_timestamp_seconds": 1_796_076_000.0,
    }


def test_without_maintenance_windows_the_gauge_says_always_open() -> None:
    assert window_samples(None) == {
        "upgrader_maintenance_window_open": 1.0,
        "upgrader_maintenance_window_next_open_timestamp_seconds": 0.0,
        "upgrader_maintenance_window_closes_timestamp_seconds": 0.0,
    }


def gate_samples(gate: GateReport | None) -> dict[str, float]:
    metrics = Metrics(leading=lambda: True)
    metrics.rollout.update(replace(STATUS, phase=Phase.RUNNING, alert_gate=gate))
    samples = scrape(metrics)
    return {name: samples[name][0][1] for name in samples if name.startswith("upgrader_alert_gate_")}


def test_the_alert_gate_gauges_say_open_and_how_many_matching_alerts_fire() -> None:
    url = "http://prometheus.monitoring:9090"
    firing = ['GPUServingSLOBurn{severity="critical"} since 2026-11-30T21:58:00Z', "NodeDiskFull"]
    assert gate_samples(GateReport(False, url, tuple(firing), None)) == {
        "upgrader_alert_gate_open": 0.0, "upgrader_alert_gate_firing_alerts": 2.0,
    }
    down = GateReport(False, url, (), "unreachable: Connection refused")
    assert gate_samples(down) == {"upgrader_alert_gate_open": 0.0, "upgrader_alert_gate_firing_alerts": 0.0}
    quiet = GateReport(True, url, (), None)
    assert gate_samples(quiet) == {"upgrader_alert_gate_open": 1.0, "upgrader_alert_gate_firing_alerts": 0.0}


def test_without_an_alert_gate_the_gauge_says_open() -> None:
    assert gate_samples(None) == {"upgrader_alert_gate_open": 1.0, "upgrader_alert_gate_firing_alerts": 0.0}
