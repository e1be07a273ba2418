"""The leader Lease when the replicas' clocks disagree (docs/operations.md#which-clock-each-timer-runs-on):
another holder's Lease expires one duration after this replica last saw it change, on this replica's
own clock, as client-go judges it; never by comparing the holder's renewTime with our clock."""

from __future__ import annotations

import pytest

from upgrader.core.model.timefmt import rfc3339_micro
from upgrader.kube.api import KubeApi
from upgrader.kube.leader import LeaderElector
from upgrader.sim.cluster import EmulatedCluster

DURATION = 15


@pytest.fixture
def cluster() -> EmulatedCluster:
    cluster = EmulatedCluster.virtual()
    cluster.create("namespaces", {"metadata": {"name": "gpu-operator"}})
    return cluster


def replica(cluster: EmulatedCluster, name: str, skew: float = 0.0) -> LeaderElector:
    """A replica whose clock reads `skew` seconds ahead of the cluster's (behind when negative)."""
    base = cluster.store.clock.now

    def clock() -> float:
        return base() + skew

    api = KubeApi(cluster.client(), sleep=lambda _: None)
    return LeaderElector(api, "gpu-operator", "gpu-driver-upgrader", name, DURATION, clock)


@pytest.mark.parametrize("skew", [20.0, 600.0, -600.0])
def test_a_standby_with_a_skewed_clock_never_takes_a_lease_the_leader_renews(
    cluster: EmulatedCluster, skew: float
) -> None:
    leader, standby = replica(cluster, "leader"), replica(cluster, "standby", skew)
    assert leader.acquire_or_renew()
    for second in range(120):
        if second % 5 == 0:
            assert leader.acquire_or_renew(), f"the leader lost its Lease at {second}s"
        assert not standby.acquire_or_renew(), f"the standby took a renewed Lease at {second}s"
        assert not standby.held()
        cluster.advance(1)


@pytest.mark.parametrize("skew", [20.0, -600.0])
def test_a_standby_takes_over_one_duration_after_the_leader_stops(cluster: EmulatedCluster, skew: float) -> None:
    leader, standby = replica(cluster, "leader"), replica(cluster, "standby", skew)
    assert leader.acquire_or_renew()
    assert not standby.acquire_or_renew()  # sees the leader's renewal now
    taken = None
    for second in range(1, 40):
        cluster.advance(1)
        if standby.acquire_or_renew():
            taken = second
            break
    assert taken == DURATION, "unchanged for a whole duration as the standby saw it, and not before"
    assert not leader.renew_if_old(), "the old leader's compare-and-swap renewal fails: it cannot act any more"


def test_a_renew_time_in_the_future_left_by_a_dead_replica_does_not_stall_a_healthy_one(
    cluster: EmulatedCluster,
) -> None:
    future = rfc3339_micro(cluster.store.clock.now() + 3600)
    cluster.create(
        "leases",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "gpu-driver-upgrader", "namespace": "gpu-operator"},
            "spec": {"holderIdentity": "dead-replica", "leaseDurationSeconds": DURATION, "renewTime": future},
        },
        "gpu-operator",
        "coordination.k8s.io",
    )
    healthy = replica(cluster, "healthy")
    acted = 0
    for _ in range(50):
        acted += healthy.acquire_or_renew()
        cluster.advance(1)
    assert acted == 50 - DURATION, "held off for one duration from when it first saw the Lease, then leads"


def test_a_released_lease_is_taken_at_once(cluster: EmulatedCluster) -> None:
    first, second = replica(cluster, "first"), replica(cluster, "second", skew=-300)
    assert first.acquire_or_renew()
    first.release()
    assert second.acquire_or_renew(), "no holder: nothing to wait for"
