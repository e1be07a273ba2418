"""The leader lease judged by acknowledged renewals timed from when they were sent, on a virtual
clock where every request to the emulator takes seconds."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from upgrader.core.model.timefmt import parse_rfc3339, rfc3339_micro
from upgrader.sim.cluster import EmulatedCluster

from .latency import SlowApi, elector


@pytest.fixture
def cluster() -> EmulatedCluster:
    cluster = EmulatedCluster.virtual()
    cluster.create("namespaces", {"metadata": {"name": "gpu-operator"}})
    return cluster


def lease(cluster: EmulatedCluster) -> dict[str, Any]:
    found = cluster.get("leases", "gpu-driver-upgrader", "gpu-operator", "coordination.k8s.io")
    assert found is not None
    return found


def lease_requests(cluster: EmulatedCluster, since: int) -> list[tuple[str, int]]:
    return [(r.verb, r.status) for r in cluster.requests[since:] if r.resource == "leases"]


def take_over(cluster: EmulatedCluster, holder: str, duration: int = 15) -> None:
    """Another replica (or an admin) writes the Lease behind our back."""
    current = copy.deepcopy(lease(cluster))  # the store's own object: a change in place is no change
    now = rfc3339_micro(cluster.store.clock.now())
    current["spec"].update({"holderIdentity": holder, "renewTime": now, "leaseDurationSeconds": duration})
    cluster.store.replace(cluster.type("leases", "coordination.k8s.io"), "gpu-operator", "gpu-driver-upgrader", current)


def test_renewing_a_held_lease_is_one_request(cluster: EmulatedCluster) -> None:
    me = elector(SlowApi(cluster).api(), cluster)
    assert me.acquire_or_renew()
    assert lease_requests(cluster, 0) == [("get", 404), ("create", 201)]
    before = len(cluster.requests)
    for _ in range(5):
        assert me.acquire_or_renew()
    assert lease_requests(cluster, before) == [("update", 200)] * 5


def test_a_renewal_counts_from_when_it_was_sent(cluster: EmulatedCluster) -> None:
    slow = SlowApi(cluster)
    slow.delay = lambda method, path: 2.0
    me = elector(slow.api(), cluster)
    me.acquire_or_renew()
    sent = cluster.store.clock.now()
    assert me.acquire_or_renew()
    # The answer took 2 s: we count from the send, as others count from the renewTime we wrote.
    assert me.renewed_at == sent == parse_rfc3339(lease(cluster)["spec"]["renewTime"])
    assert me.age() == pytest.approx(2.0)
    assert me.holds()


def test_an_answer_too_late_to_act_on_still_holds_the_lease(cluster: EmulatedCluster) -> None:
    slow = SlowApi(cluster)
    me = elector(slow.api(), cluster)
    me.acquire_or_renew()
    slow.delay = lambda method, path: 12.0 if method == "PUT" else 1.0
    assert me.acquire_or_renew()  # acknowledged, but 12 s after it was sent
    assert me.held() and not me.holds()
    assert me.why_stale() == "last acknowledged renewal 12.0 s ago, older than 10.0 s (API latency?)"


def test_a_renewal_that_times_out_keeps_the_last_acknowledged_one(cluster: EmulatedCluster) -> None:
    slow = SlowApi(cluster)
    me = elector(slow.api(), cluster)
    me.acquire_or_renew()
    renewed = me.renewed_at
    slow.fail = lambda method, path: method == "PUT"
    slow.delay = lambda method, path: 0.5
    assert not me.acquire_or_renew()
    assert me.renewed_at == renewed and me.held(), "nobody else can take it before it expires"
    assert me.why_stale().startswith("renewing failed (0 Unreachable:")
    cluster.advance(15)
    assert not me.held()


def test_a_conflict_reads_the_lease_and_gives_way_to_a_new_holder(cluster: EmulatedCluster) -> None:
    me = elector(SlowApi(cluster).api(), cluster)
    me.acquire_or_renew()
    cluster.advance(20)  # our lease expired; another replica took it
    take_over(cluster, "other")
    before = len(cluster.requests)
    assert not me.acquire_or_renew()
    assert lease_requests(cluster, before) == [("update", 409), ("get", 200)]
    assert not me.held() and me.renewed_at is None
    assert lease(cluster)["spec"]["holderIdentity"] == "other"


def test_a_conflict_with_our_own_lease_renews_after_reading_it(cluster: EmulatedCluster) -> None:
    me = elector(SlowApi(cluster).api(), cluster)
    me.acquire_or_renew()
    take_over(cluster, "me")  # changed behind our back, still ours (say our last answer was lost)
    before = len(cluster.requests)
    assert me.acquire_or_renew()
    assert lease_requests(cluster, before) == [("update", 409), ("get", 200), ("update", 200)]
    assert me.acquire_or_renew()
    assert lease_requests(cluster, before)[3:] == [("update", 200)]


def test_renew_if_old_renews_only_an_old_renewal_and_never_acquires(cluster: EmulatedCluster) -> None:
    slow = SlowApi(cluster)
    slow.delay = lambda method, path: 1.0
    me = elector(slow.api(), cluster)
    assert not me.renew_if_old() and len(cluster.requests) == 0, "a pass that did not lead never acquires"
    me.acquire_or_renew()
    before = len(cluster.requests)
    assert me.renew_if_old()  # 1 s old: fresh enough, no request
    assert len(cluster.requests) == before
    cluster.advance(4)
    assert me.renew_if_old()  # 5 s old, a third of the duration: renewed, in one request
    assert lease_requests(cluster, before) == [("update", 200)]
    assert me.age() == pytest.approx(1.0)


def test_release_hands_the_lease_over_with_one_request(cluster: EmulatedCluster) -> None:
    me = elector(SlowApi(cluster).api(), cluster)
    me.acquire_or_renew()
    before = len(cluster.requests)
    me.release()
    assert lease_requests(cluster, before) == [("update", 200)]
    assert lease(cluster)["spec"]["holderIdentity"] is None
    other = elector(SlowApi(cluster).api(), cluster, identity="other")
    assert other.acquire_or_renew()



def test_a_renewal_past_expiry_lands_only_if_nobody_took_the_lease(cluster: EmulatedCluster) -> None:
    me = elector(SlowApi(cluster).api(), cluster)
    me.acquire_or_renew()
    cluster.advance(20)  # a long pass: expired, but nobody wrote the Lease meanwhile
    before = len(cluster.requests)
    assert me.renew_if_old() and not me.reacquired
    assert lease_requests(cluster, before) == [("update", 200)]
    cluster.advance(20)
    take_over(cluster, "other")
    before = len(cluster.requests)
    assert not me.renew_if_old()
    assert lease_requests(cluster, before) == [("update", 409)], "mid-pass it never reads and acquires"
    assert not me.held() and lease(cluster)["spec"]["holderIdentity"] == "other"
