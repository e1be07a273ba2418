"""Alert gating against a real Prometheus (Debian's package; skipped without it, as the other
Prometheus tests are): a rule on a metric a tiny local exporter serves fires and resolves while the
controller rolls an emulated fleet (virtual clock), and the rollout holds and goes on with it."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.spread import build_spread, zone_names
from upgrader.sim.proving.invariants import RolloutRecorder

from ..prometheus_tools import Prometheus, binary

ZONES = zone_names(1)
RULES = {"groups": [{"name": "serving", "rules": [
    {"alert": "GPUServingSLOBurn", "expr": "gpu_serving_slo_burning > 0", "labels": {"severity": "critical"}},
]}]}


class Exporter:
    """Serves `gpu_serving_slo_burning <value>` on /metrics; the test flips `value`."""

    def __init__(self) -> None:
        self.value = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = f"# TYPE gpu_serving_slo_burning gauge\ngpu_serving_slo_burning {outer.value}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Prometheus, Exporter]]:
    binary("prometheus")
    exporter = Exporter()
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(RULES))
    prometheus = Prometheus(tmp_path, {exporter.target: "1s"}, rules, labels={"namespace": "serve"}, job="serving")
    try:
        yield prometheus, exporter
    finally:
        prometheus.stop()
        exporter.server.shutdown()
        exporter.server.server_close()


def firing(prometheus: Prometheus) -> list[str]:
    return [a["labels"]["alertname"] for a in prometheus.api("alerts")["alerts"] if a["state"] == "firing"]


def until(check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds}s: {what}"
        time.sleep(0.2)


def by_state(report: PassReport) -> dict[str, Any]:
    return {k: v for k, v in (getattr(report.status, "nodes_by_state", None) or {}).items() if v}


def test_a_rule_firing_in_prometheus_holds_the_rollout_and_its_resolution_releases_it(
    world: tuple[Prometheus, Exporter],
) -> None:
    prometheus, exporter = world
    cluster = EmulatedCluster.virtual()
    info = build_spread(cluster, 2, len(ZONES))
    recorder = RolloutRecorder(cluster)
    rules = policy_from_mapping({
        "maxParallelUpgrades": 1,
        "maxUnavailable": "100%",
        "alertGate": {"prometheusURL": prometheus.url, "alerts": ["GPUServingSLOBurn"]},
    })
    controller = Controller(KubeApi(cluster.client(), sleep=lambda _: None), rules,
                            Settings(identity="alert-gate-prometheus"), cluster.store.clock.now)

    def run(passes: int = 1) -> PassReport:
        report = controller.reconcile()
        cluster.advance(5.0)
        for _ in range(passes - 1):
            report = controller.reconcile()
            cluster.advance(5.0)
        return report

    def run_until(done: int) -> PassReport:
        for _ in range(400):
            report = run()
            if by_state(report).get("upgrade-done") == done:
                return report
        raise AssertionError(f"not {done} done: {by_state(report)}")

    exporter.value = 1
    until(lambda: firing(prometheus) == ["GPUServingSLOBurn"], "the alert fires")
    held = run(5)
    assert by_state(held) == {"upgrade-required": 2}
    assert held.status.waiting_on.reason == "alert-firing"
    assert re.fullmatch(
        r'alert gate: GPUServingSLOBurn\{severity="critical", namespace="serve"\} since \S+Z is firing in '
        + re.escape(f"Prometheus {prometheus.url}; nodes in progress finish, none starts until it resolves; "
                    "see runbooks/alert-gate.md"),
        held.status.message,
    ), held.status.message

    exporter.value = 0
    until(lambda: firing(prometheus) == [], "the alert resolves")
    assert by_state(run()).get("upgrade-required") == 1  # the first node starts

    exporter.value = 1  # fires again while the first node is in progress: that node finishes
    until(lambda: firing(prometheus) == ["GPUServingSLOBurn"], "the alert fires again")
    assert by_state(run_until(1)) == {"upgrade-done": 1, "upgrade-required": 1}
    assert by_state(run(5)) == {"upgrade-done": 1, "upgrade-required": 1}

    exporter.value = 0
    until(lambda: firing(prometheus) == [], "the alert resolves again")
    assert by_state(run_until(2)) == {"upgrade-done": 2}
    assert recorder.check(rules, info.domain_of, ZONES[0], ZONES) == []


def test_a_stopped_prometheus_holds_the_rollout_with_its_own_reason(world: tuple[Prometheus, Exporter]) -> None:
    prometheus, _ = world
    cluster = EmulatedCluster.virtual()
    build_spread(cluster, 1, len(ZONES))
    rules = policy_from_mapping({"alertGate": {"prometheusURL": prometheus.url, "alerts": ["GPUServingSLOBurn"]}})
    controller = Controller(KubeApi(cluster.client(), sleep=lambda _: None), rules,
                            Settings(identity="alert-gate-down"), cluster.store.clock.now)
    prometheus.stop()
    report = controller.reconcile()
    assert by_state(report) == {"upgrade-required": 1}
    assert report.status.waiting_on.reason == "alert-gate-unavailable"
    assert report.status.message == (
        f"alert gate: cannot read alerts from Prometheus {prometheus.url} (unreachable: Connection refused); "
        "nodes in progress finish, none starts until it answers (fail closed); see runbooks/alert-gate.md"
    )
