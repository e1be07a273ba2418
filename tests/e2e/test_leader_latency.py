"""Whole rollouts with seconds of API latency, on a virtual clock: every request to the emulator
takes 1-2 s, so a pass of dozens of requests outlasts the lease many times over. The leader still
acts, every write lands under a lease nobody else could take, a lease someone else holds means no
write at all, and a leader whose renewals come back too late says so in the log and on /readyz."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from typing import Any

import pytest

from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.metrics import Metrics, MetricsServer
from upgrader.controller.runner import Health
from upgrader.controller.settings import Settings
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.model.timefmt import rfc3339_micro
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import ScenarioInfo, build
from upgrader.sim.proving.invariants import RolloutRecorder

from ..kube.latency import WRITES, SlowApi, elector, write_ages

POLICY: dict[str, Any] = {"maxParallelUpgrades": 2, "maxUnavailable": "50%"}
DURATION = 15.0
STALE = "holding the lease gpu-operator/gpu-driver-upgrader but could not act"


def slow_world(low: float = 1.0, high: float = 2.0) -> tuple[EmulatedCluster, ScenarioInfo, SlowApi, Controller]:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    slow = SlowApi(cluster, low, high, seed=11)
    api = slow.api()
    settings = Settings(identity="me", lease_duration_seconds=DURATION)
    controller = Controller(
        api, policy_from_mapping(POLICY), settings, cluster.store.clock.now, elector(api, cluster, "me", DURATION)
    )
    return cluster, info, slow, controller


def passes(cluster: EmulatedCluster, controller: Controller, count: int) -> list[PassReport]:
    reports = []
    for _ in range(count):
        reports.append(controller.reconcile())
        cluster.advance(1)  # the pause between passes
    return reports


def states(cluster: EmulatedCluster, info: ScenarioInfo) -> list[str | None]:
    return [((cluster.get("nodes", n) or {})["metadata"]["labels"]).get(STATE_LABEL) for n in info.nodes]


def node_writes(cluster: EmulatedCluster, since: int = 0) -> list[str]:
    return [f"{r.verb} {r.path}" for r in cluster.requests[since:] if r.verb in WRITES and r.resource != "leases"]


def test_a_rollout_goes_on_with_seconds_of_latency_on_every_request() -> None:
    cluster, info, slow, controller = slow_world()
    recorder = RolloutRecorder(cluster)
    started = cluster.store.clock.now()
    reports: list[PassReport] = []
    while len(reports) < 300 and (not reports or getattr(reports[-1].status, "phase", None) != "Done"):
        reports += passes(cluster, controller, 1)
    assert getattr(reports[-1].status, "phase", None) == "Done", getattr(reports[-1].status, "message", None)
    assert states(cluster, info) == [State.DONE.value] * len(info.nodes)
    assert {r.result for r in reports} == {"ok"}, "every pass acted: none taken for not leading"
    moved = {r.node for r in recorder.records if r.state == State.DONE.value}
    assert moved == set(info.nodes)
    requests_per_pass = slow.sent / len(reports)
    assert requests_per_pass > 8, "passes were long: many seconds each, several leases' worth in all"
    assert cluster.store.clock.now() - started > 10 * DURATION
    ages = write_ages(cluster, "me")
    assert len(ages) > 50
    # Each write was sent on a renewal younger than two thirds of the lease, and reached the API
    # server within one request's latency of that: never on a lease another replica could take.
    assert max(ages) < DURATION * 2 / 3 + 1
    lease_verbs = [r.verb for r in cluster.requests if r.resource == "leases"]
    assert lease_verbs[:2] == ["get", "create"] and set(lease_verbs[2:]) == {"update"}, "renewing is one PUT"


def test_with_a_lease_someone_else_holds_nothing_is_written() -> None:
    cluster, info, _, controller = slow_world()
    now = rfc3339_micro(cluster.store.clock.now())
    other = {"holderIdentity": "other", "renewTime": now, "leaseDurationSeconds": 3600}
    cluster.create(
        "leases", {"metadata": {"name": "gpu-driver-upgrader"}, "spec": other}, "gpu-operator", "coordination.k8s.io"
    )
    health = Health(controller, cluster.store.clock.now)
    before = states(cluster, info)
    reports = passes(cluster, controller, 20)
    assert {r.result for r in reports} == {"not_leader"} and not any(r.leader for r in reports)
    assert node_writes(cluster) == []
    assert {(r.verb, r.status) for r in cluster.requests if r.resource == "leases"} == {("get", 200)}
    assert states(cluster, info) == before
    assert health.ready(), "a replica that is not the leader is ready"


def readyz(server: MetricsServer) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_renewals_answered_too_late_stop_the_writes_and_say_so(caplog: pytest.LogCaptureFixture) -> None:
    cluster, _, slow, controller = slow_world()
    health = Health(controller, cluster.store.clock.now)
    server = MetricsServer(Metrics(), 0, health.healthy, health.ready, "127.0.0.1", health.unready_reason).start()
    try:
        assert {r.result for r in passes(cluster, controller, 5)} == {"ok"}
        assert readyz(server) == (200, "ok\n")
        fast = slow.delay
        slow.delay = lambda method, path: 12.0 if "/leases/" in path else fast(method, path)
        before = len(cluster.requests)
        with caplog.at_level(logging.WARNING, logger="upgrader"):
            stale = passes(cluster, controller, 5)
        assert {r.result for r in stale} == {"stale_lease"} and all(r.leader for r in stale)
        assert node_writes(cluster, before) == [], "nothing written on a renewal 12 s old"
        lines = [r.getMessage() for r in caplog.records if STALE in r.getMessage()]
        assert len(lines) == 5
        assert lines[0] == (
            f"{STALE}: last acknowledged renewal 12.0 s ago, older than 10.0 s (API latency?)"
        )
        assert not health.ready()
        code, body = readyz(server)
        assert code == 503 and body.startswith("holding the lease but could not act: last acknowledged renewal 12.0 s")
        slow.delay = fast
        assert passes(cluster, controller, 1)[0].result == "ok"
        assert health.ready() and readyz(server)[0] == 200
    finally:
        server.stop()


def test_a_lease_that_cannot_be_renewed_mid_pass_stops_the_writes(caplog: pytest.LogCaptureFixture) -> None:
    cluster, _, slow, controller = slow_world(2.0, 2.0)
    assert {r.result for r in passes(cluster, controller, 3)} == {"ok"}
    renewals = 0

    def lease_times_out(method: str, path: str) -> bool:
        nonlocal renewals
        renewals += method == "PUT" and "/leases/" in path
        return renewals > 1  # the next pass renews once more, then every renewal times out

    slow.fail = lease_times_out
    with caplog.at_level(logging.WARNING, logger="upgrader"):
        reports = passes(cluster, controller, 12)
    results = [r.result for r in reports]
    assert "stale_lease" in results, results
    stale = next(r for r in reports if r.result == "stale_lease")
    assert stale.stale is not None and stale.stale.startswith("renewing failed (0 Unreachable:")
    assert any(STALE in r.getMessage() and "renewing failed" in r.getMessage() for r in caplog.records)
    # Once the lease has expired we no longer hold it: a lease we cannot reach is an error.
    assert results[-1] == "error" and not reports[-1].leader
    assert max(write_ages(cluster, "me")) < DURATION * 2 / 3 + 1, "no write on a stale or expired lease"
