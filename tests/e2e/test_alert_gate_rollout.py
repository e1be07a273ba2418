"""Alert gating through the controller: each pass asks a local Prometheus stand-in once, and the
emulated rollout (virtual clock, no HTTP to the emulator) holds while a matching alert fires or the
answer is garbage, lets the node in progress finish, and goes on once the alert resolves."""

from __future__ import annotations

from typing import Any

from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.spread import build_spread, zone_names
from upgrader.sim.proving.invariants import RolloutRecorder

from ..conftest import FakePrometheus, alert, answer

ZONES = zone_names(1)


def passes(cluster: EmulatedCluster, controller: Controller, count: int) -> PassReport:
    report = controller.reconcile()
    for _ in range(count - 1):
        cluster.advance(5.0)
        report = controller.reconcile()
    cluster.advance(5.0)
    return report


def by_state(report: PassReport) -> dict[str, Any]:
    return {k: v for k, v in (getattr(report.status, "nodes_by_state", None) or {}).items() if v}


def test_a_firing_alert_holds_starts_and_its_resolution_lets_the_rollout_finish(prometheus: FakePrometheus) -> None:
    cluster = EmulatedCluster.virtual()
    info = build_spread(cluster, 2, len(ZONES))
    recorder = RolloutRecorder(cluster)
    rules = policy_from_mapping({
        "maxParallelUpgrades": 1,
        "maxUnavailable": "100%",
        "alertGate": {"prometheusURL": prometheus.url, "matchers": [{"label": "severity", "regex": "critical"}]},
    })
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, rules, Settings(identity="alert-gate"), cluster.store.clock.now)

    burn = alert("GPUServingSLOBurn", "firing", severity="critical", namespace="serve")
    prometheus.serve(answer(burn, alert("Watchdog", "firing", severity="none")))
    held = passes(cluster, controller, 5)
    assert by_state(held) == {"upgrade-required": 2}
    assert held.status.message == (
        'alert gate: GPUServingSLOBurn{severity="critical", namespace="serve"} since 2026-11-30T21:58:00.123Z '
        f"is firing in Prometheus {prometheus.url}; nodes in progress finish, none starts until it resolves; "
        "see runbooks/alert-gate.md"
    )
    assert prometheus.requests == ["/api/v1/alerts"] * 5  # once per pass

    prometheus.serve(answer(alert("GPUServingSLOBurn", "pending", severity="critical")))  # not firing yet
    started = passes(cluster, controller, 1)
    assert by_state(started).get("upgrade-required") == 1

    prometheus.serve(answer(burn))  # fires again while the first node is in progress: it finishes
    report = started
    for _ in range(400):
        report = passes(cluster, controller, 1)
        if by_state(report).get("upgrade-done") == 1:
            break
    assert by_state(report) == {"upgrade-done": 1, "upgrade-required": 1}
    assert by_state(passes(cluster, controller, 5)) == {"upgrade-done": 1, "upgrade-required": 1}

    prometheus.serve(b"<html>sign in</html>")  # a login page in front of Prometheus: fail closed
    garbage = passes(cluster, controller, 3)
    assert by_state(garbage) == {"upgrade-done": 1, "upgrade-required": 1}
    assert garbage.status.waiting_on.reason == "alert-gate-unavailable"
    assert garbage.status.message == (
        f"alert gate: cannot read alerts from Prometheus {prometheus.url} (bad answer: not JSON: "
        "<html>sign in</html>); nodes in progress finish, none starts until it answers (fail closed); "
        "see runbooks/alert-gate.md"
    )

    prometheus.serve(answer())  # resolved
    for _ in range(400):
        report = passes(cluster, controller, 1)
        if by_state(report).get("upgrade-done") == 2:
            break
    assert by_state(report) == {"upgrade-done": 2}
    assert recorder.check(rules, info.domain_of, ZONES[0], ZONES) == []
