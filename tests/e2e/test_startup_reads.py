"""`upgrader run`'s start reads each collection as few times as it can: the policy check's lists seed
the watch-fed copy (its watches start from them, no LIST of their own), and the first pass reads that
copy when the Lease was free from before those lists until it was taken; when another replica may
have led in between, the first pass LISTs the fleet again (docs/operations.md, "How a pass reads the
cluster")."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest
from kubernetes import client as k8s

from upgrader.controller.loop import Controller
from upgrader.controller.runner import build_controller, check_policy_against_cluster, make_cache, start_watches
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import Policy
from upgrader.kube.leader import LeaderElector
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

NODES, DRIVER_PODS = "/api/v1/nodes", "/api/v1/namespaces/gpu-operator/pods"
DAEMONSETS = "/apis/apps/v1/namespaces/gpu-operator/daemonsets"
REVISIONS = "/apis/apps/v1/namespaces/gpu-operator/controllerrevisions"
BUDGETS = "/apis/policy/v1/poddisruptionbudgets"


def other_replica(controller: Controller) -> LeaderElector:
    mine = controller.elector
    assert mine is not None
    return LeaderElector(mine.api, mine.namespace, mine.name, "other-replica", mine.duration, time.time)


def started(url: str, between: Callable[[Controller], None] = lambda c: None) -> tuple[Controller, threading.Event]:
    """`upgrader run`'s start up to its first pass; `between` runs after the check, before the pass."""
    stop, wake = threading.Event(), threading.Event()
    controller = build_controller(k8s.ApiClient(k8s.Configuration(host=url)), Policy(), Settings(identity="start"))
    make_cache(controller, wake)
    check_policy_against_cluster(controller)
    cache = start_watches(controller, stop, wake)
    deadline = time.monotonic() + 30
    while not (cache.nodes.synced and cache.driver_pods.synced and cache.pdbs.synced) and time.monotonic() < deadline:
        time.sleep(0.01)
    between(controller)
    report = controller.reconcile()
    assert report.error is None and report.acted
    return controller, stop


def lists_of(cluster: EmulatedCluster) -> tuple[int, ...]:
    lists = Counter(r.path for r in cluster.requests if r.verb == "list")
    return tuple(lists[p] for p in (NODES, DRIVER_PODS, BUDGETS, DAEMONSETS, REVISIONS))


def test_with_the_lease_free_the_start_lists_nodes_pods_and_budgets_once() -> None:
    cluster = EmulatedCluster()
    build(cluster, "healthy")
    url = cluster.serve()
    stop = None
    try:
        _, stop = started(url)
        # the check's lists seeded the copy the first pass read; DaemonSets and revisions are no copy's
        assert lists_of(cluster) == (1, 1, 1, 2, 2)
        watches = Counter(r.path for r in cluster.requests if r.verb == "watch")
        assert watches[NODES] >= 1 and watches[DRIVER_PODS] >= 1 and watches[BUDGETS] >= 1
        check_version = next(r for r in cluster.requests if r.verb == "list" and r.path == NODES)
        first_watch = next(r for r in cluster.requests if r.verb == "watch" and r.path == NODES)
        assert check_version.seq < first_watch.seq
    finally:
        if stop is not None:
            stop.set()
        cluster.stop()


@pytest.mark.parametrize("held_at_the_peek", [False, True], ids=["led-in-between", "held-at-the-peek"])
def test_when_another_replica_may_have_led_since_the_lists_the_first_pass_lists_again(held_at_the_peek: bool) -> None:
    cluster = EmulatedCluster()
    build(cluster, "healthy")
    url = cluster.serve()
    stop = None
    other: list[LeaderElector] = []

    def lead_then_release(controller: Controller) -> None:
        if not other:
            other.append(other_replica(controller))
            assert other[0].acquire_or_renew()
        other[0].release()

    try:
        if held_at_the_peek:
            probe = build_controller(k8s.ApiClient(k8s.Configuration(host=url)), Policy(), Settings(identity="probe"))
            other.append(other_replica(probe))
            assert other[0].acquire_or_renew()
        _, stop = started(url, lead_then_release)
        assert lists_of(cluster)[:3] == (2, 2, 2)
    finally:
        if stop is not None:
            stop.set()
        cluster.stop()
