"""The API server's clock, read from the `Date` of its answers (kube/server_clock.py): a replica whose own
clock is minutes off stamps and times its waits on the server's clock, so another replica, off the
other way, judges them on the same one (docs/operations.md#which-clock-each-timer-runs-on)."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from kubernetes import client as k8s

from upgrader.controller.runner import build_controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import STATE_LABEL, STATE_SINCE, State
from upgrader.core.model.timefmt import parse_rfc3339
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.kube.server_clock import ServerClock, server_clock_of
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build


class Machine:
    """A local clock `skew` seconds off a server clock, and answers dated as an HTTP server dates them."""

    def __init__(self, skew: float, server_start: float = 1_800_000_000.25) -> None:
        self.server, self.skew = server_start, skew

    def local(self) -> float:
        return self.server + self.skew

    def answer(self, clock: ServerClock, round_trip: float = 0.004) -> None:
        sent = clock.local()
        self.server += round_trip / 2
        date = formatdate(self.server, usegmt=True)  # whole seconds, as Go's net/http writes it
        self.server += round_trip / 2
        clock.observe(date, sent, clock.local())


@pytest.mark.parametrize("skew", [-1200.0, -20.0, 0.0, 7.3, 900.0])
def test_the_offset_comes_within_half_a_second_from_whole_second_dates(skew: float) -> None:
    machine = Machine(skew)
    clock = ServerClock(machine.local)
    assert clock.now() == machine.local(), "before any answer: the local clock"
    for _ in range(40):
        machine.answer(clock)
        machine.server += 0.37  # answers at many fractions of a second narrow the bounds
    assert abs(clock.now() - machine.server) <= 0.5, (clock.offset, skew)


def test_a_clock_stepped_meanwhile_is_followed_from_the_next_answer() -> None:
    machine = Machine(600.0)
    clock = ServerClock(machine.local)
    for _ in range(20):
        machine.answer(clock)
        machine.server += 0.41
    machine.skew = -300.0  # NTP stepped this machine's clock back 15 minutes
    machine.answer(clock)
    assert abs(clock.now() - machine.server) <= 1.0
    machine.answer(clock, round_trip=0.2)
    assert abs(clock.now() - machine.server) <= 1.0


def test_an_answer_without_a_readable_date_teaches_nothing() -> None:
    clock = ServerClock(lambda: 100.0)
    for date in (None, "", "yesterday", "Mon, 99 Foo 2026 99:99:99 GMT"):
        clock.observe(date, 100.0, 100.0)
    assert clock.offset == 0.0 and clock.answers == 0


def test_the_emulator_dates_its_answers_on_its_own_clock() -> None:
    cluster = EmulatedCluster.virtual()  # 2026-01-01, whatever this machine's clock says
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    api.list("/api/v1/nodes")
    assert abs(api.server_clock.now() - cluster.store.clock.now()) <= 1.0


@pytest.mark.parametrize("skew", [-900.0, 900.0])
def test_a_replica_minutes_off_stamps_its_waits_and_its_lease_on_the_api_servers_clock(skew: float) -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy", 6)
    client = cluster.client()
    server_clock_of(client).local = lambda: cluster.store.clock.now() + skew
    policy = policy_from_mapping({"maxParallelUpgrades": 2, "maxUnavailable": 2})
    controller = build_controller(client, policy, Settings(identity="skewed"))
    for _ in range(3):
        controller.reconcile()
        cluster.advance(1)
    stamps = {}
    for name in info.nodes:
        meta = (cluster.get("nodes", name) or {})["metadata"]
        if meta["labels"].get(STATE_LABEL) not in (None, State.UPGRADE_REQUIRED.value):
            stamps[name] = parse_rfc3339(meta["annotations"][STATE_SINCE])
    assert len(stamps) == 2, "two nodes started"
    now = cluster.store.clock.now()
    assert all(now - 4.0 <= t <= now + 1.0 for t in stamps.values()), (stamps, now, skew)
    lease = cluster.get("leases", "gpu-driver-upgrader", "gpu-operator", "coordination.k8s.io") or {}
    renewed = parse_rfc3339(lease["spec"]["renewTime"])
    assert now - 2.0 <= renewed <= now + 1.0, (renewed, now)


def test_two_replicas_off_opposite_ways_read_the_same_time() -> None:
    cluster = EmulatedCluster.virtual()
    url = cluster.serve()  # over HTTP: the Date header http.server writes
    try:
        apis = []
        for skew in (-1800.0, 1800.0):
            api = KubeApi(k8s.ApiClient(k8s.Configuration(host=url)), sleep=lambda _: None)
            api.server_clock.local = lambda skew=skew: cluster.store.clock.now() + skew
            for _ in range(5):
                api.list("/api/v1/nodes")
            apis.append(api)
        first, second = (a.server_clock.now() for a in apis)
        assert abs(first - second) <= 1.0 and abs(first - cluster.store.clock.now()) <= 1.0
    finally:
        cluster.stop()
