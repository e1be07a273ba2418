"""Whole rollouts on a virtual clock with passes reading nodes and driver pods from the watch-fed
cache, the cache lagging the cluster by a set number of passes: the promises hold all the same.
The controller's own writes reach the cache at once; others' changes it has not seen yet (an
admin's cordon) make its guarded writes fail rather than go through on a stale decision."""

from __future__ import annotations

import pytest

from tests.shown import shown
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import FAILED_REASON, STATE_LABEL, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.kube.cache import ClusterCache
from upgrader.kube.leader import LeaderElector
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder

POLICY = {
    "maxParallelUpgrades": 2,
    "maxUnavailable": 2,
    "failureDomains": {"canary": "us-east-1a", "soakSeconds": 5},
    "drain": {"enable": True, "podSelector": "app=api-gateway", "deleteEmptyDir": True},
}


@pytest.mark.parametrize("lag", [1, 3, 8])
def test_a_lagging_cache_keeps_every_promise(lag: int) -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    recorder = RolloutRecorder(cluster)
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    policy = policy_from_mapping(POLICY)
    controller = Controller(api, policy, Settings(identity="cached"), cluster.store.clock.now)
    cache = ClusterCache(KubeApi(cluster.client(), sleep=lambda _: None), controller.settings, lambda: None)
    controller.cache = cache
    passes = node_lists = 0
    status: dict[str, object] = {}
    for second in range(900):
        if second % lag == 0:  # the watches deliver only every `lag` passes
            cache.nodes.step()
            cache.driver_pods.step()
        before = len(cluster.requests)
        status = shown(controller.reconcile().status)
        passes += 1
        node_lists += sum(1 for r in cluster.requests[before:] if r.verb == "list" and r.path == "/api/v1/nodes")
        if status.get("phase") == "Done":
            break
        cluster.advance(1)
    assert status.get("phase") == "Done", status.get("message")
    assert node_lists == 1, "only the first pass (fresh reads) lists the nodes; the rest read the cache"
    for name in info.nodes:
        meta = cluster.get("nodes", name)["metadata"]
        assert meta["labels"][STATE_LABEL] == State.DONE.value, meta.get("annotations", {}).get(FAILED_REASON)
    domain_of = {n: z for z, nodes in info.domains.items() for n in nodes}
    assert recorder.check(policy, domain_of, "us-east-1a", ["us-east-1a", "us-east-1b", "us-east-1c"]) == []
    assert cluster.daemonsets.incidents == [], "a driver restarted under running GPU pods"
    assert passes > 20
    # Every pass saw what the earlier ones wrote: no write went out against a state already left.
    refused = [(r.path, r.status) for r in cluster.requests if r.resource == "nodes" and r.status >= 400]
    assert refused == []


@pytest.mark.parametrize("cached", [True, False], ids=["cache", "lists"])
def test_a_node_an_admin_cordons_while_it_waits_stays_cordoned(cached: bool) -> None:
    """The admin's cordon lands while the copy lags (the watches deliver every 8 passes): the start
    decided on the stale copy must not go through, or upgrader would take the cordon for its own
    and lift it at the end."""
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy_from_mapping(POLICY), Settings(identity="cached"), cluster.store.clock.now)
    cache = ClusterCache(KubeApi(cluster.client(), sleep=lambda _: None), controller.settings, lambda: None)
    controller.cache = cache if cached else None
    victim = info.domains["us-east-1b"][0]

    def state(name: str) -> str | None:
        return cluster.get("nodes", name)["metadata"]["labels"].get(STATE_LABEL)

    cordoned = False
    status: dict[str, object] = {}
    for second in range(900):
        if second % 8 == 0:
            cache.nodes.step()
            cache.driver_pods.step()
        if not cordoned and all(state(n) == State.DONE.value for n in info.domains["us-east-1a"]):
            assert state(victim) == State.UPGRADE_REQUIRED.value
            patch = {"spec": {"unschedulable": True}}
            cluster.store.patch(cluster.type("nodes"), None, victim, "application/merge-patch+json", patch)
            cordoned = True
        status = shown(controller.reconcile().status)
        if status.get("phase") == "Done":
            break
        cluster.advance(1)
    assert cordoned and status.get("phase") == "Done", status.get("message")
    node = cluster.get("nodes", victim)
    assert node["spec"].get("unschedulable") is True, "the admin's cordon is kept"
    assert state(victim) == State.DONE.value


def test_without_the_cache_synced_a_pass_lists() -> None:
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy")
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy_from_mapping(POLICY), Settings(identity="cached"), cluster.store.clock.now)
    controller.cache = ClusterCache(KubeApi(cluster.client(), sleep=lambda _: None), controller.settings, lambda: None)
    for _ in range(3):  # the informers never ran: every pass reads the cluster itself
        before = len(cluster.requests)
        controller.reconcile()
        paths = [r.path for r in cluster.requests[before:] if r.verb == "list"]
        assert "/api/v1/nodes" in paths and "/api/v1/namespaces/gpu-operator/pods" in paths


def test_a_replica_that_wins_the_lease_reads_fresh_before_it_acts() -> None:
    """B leads, is cut off while A takes over and rolls, its copy left behind; when A goes away,
    B's first pass as leader LISTs nodes and driver pods instead of acting on its stale copy."""
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    recorder = RolloutRecorder(cluster)
    policy = policy_from_mapping(POLICY)
    clock = cluster.store.clock.now

    def replica(name: str) -> Controller:
        api = KubeApi(cluster.client(), sleep=lambda _: None)
        settings = Settings(identity=name, lease_duration_seconds=15)
        elector = LeaderElector(api, settings.namespace, settings.lease_name, name, 15, clock)
        controller = Controller(api, policy, settings, clock, elector)
        controller.cache = ClusterCache(KubeApi(cluster.client(), sleep=lambda _: None), settings, lambda: None)
        controller.cache.nodes.step()
        controller.cache.driver_pods.step()
        return controller

    a, b = replica("a"), replica("b")
    assert b.reconcile().leader  # B leads first, then is cut off (it runs no pass) for 20 s
    assert not a.reconcile().leader  # A stands by: it sees B's Lease, and times it from now (client-go)
    cluster.advance(20)
    for _ in range(40):  # A takes the lease and rolls; B's copy is never updated
        a.cache.nodes.step()  # type: ignore[union-attr]
        a.cache.driver_pods.step()  # type: ignore[union-attr]
        assert a.reconcile().leader
        cluster.advance(1)
    states = [cluster.get("nodes", n)["metadata"]["labels"].get(STATE_LABEL) for n in info.nodes]
    assert any(s != State.DONE.value for s in states), "A is mid-rollout when it goes away"
    cluster.advance(20)  # A goes away
    assert not b.reconcile().leader, "B first sees A's Lease now: it waits a whole duration from here"
    cluster.advance(15)  # A's Lease, unchanged for its duration as B saw it, has expired
    before = len(cluster.requests)
    report = b.reconcile()  # the only client running now: every request below is B's
    assert report.leader
    listed = {r.path for r in cluster.requests[before:] if r.verb == "list"}
    assert {"/api/v1/nodes", "/api/v1/namespaces/gpu-operator/pods"} <= listed, (
        "the first pass as leader lists nodes and driver pods itself"
    )
    status: dict[str, object] = {}
    for _ in range(600):
        b.cache.nodes.step()  # type: ignore[union-attr]
        b.cache.driver_pods.step()  # type: ignore[union-attr]
        status = shown(b.reconcile().status)
        if status.get("phase") == "Done":
            break
        cluster.advance(1)
    assert status.get("phase") == "Done", status.get("message")
    domain_of = {n: z for z, nodes in info.domains.items() for n in nodes}
    assert recorder.check(policy, domain_of, "us-east-1a", ["us-east-1a", "us-east-1b", "us-east-1c"]) == []
    refused = [(r.path, r.status) for r in cluster.requests if r.resource == "nodes" and r.status >= 400]
    assert refused == [], "B never wrote against a node state it had not seen"


def test_a_refused_node_write_makes_the_next_pass_read_the_cluster() -> None:
    """Our transition landed but its answer was lost (or someone else moved the node): the copy
    still has the old state, the next write is refused, and the pass after that LISTs."""
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy_from_mapping(POLICY), Settings(identity="cached"), cluster.store.clock.now)
    cache = ClusterCache(KubeApi(cluster.client(), sleep=lambda _: None), controller.settings, lambda: None)
    controller.cache = cache
    controller.reconcile()  # fresh: labels the fleet and starts the canary nodes
    cache.nodes.step()
    cache.driver_pods.step()
    node = info.domains["us-east-1a"][0]
    assert cluster.get("nodes", node)["metadata"]["labels"][STATE_LABEL] == State.CORDON_REQUIRED.value
    relabel = {"metadata": {"labels": {STATE_LABEL: State.WAIT_FOR_JOBS_REQUIRED.value}}}
    cluster.store.patch(cluster.type("nodes"), None, node, "application/merge-patch+json", relabel)

    def node_lists_in_a_pass() -> tuple[int, int]:
        before = len(cluster.requests)
        controller.reconcile()
        mine = cluster.requests[before:]
        lists = sum(1 for r in mine if r.verb == "list" and r.path == "/api/v1/nodes")
        refused = sum(1 for r in mine if r.resource == "nodes" and r.status in (409, 422))
        return lists, refused

    assert node_lists_in_a_pass() == (0, 1)  # from the stale copy: the cordoned transition is refused
    assert node_lists_in_a_pass() == (1, 0)  # so this one reads the cluster, and goes on from it
    assert node_lists_in_a_pass() == (0, 0)
