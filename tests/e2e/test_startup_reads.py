"""`upgrader run`'s start reads each collection as few times as it can: the policy check's lists seed
the watch-fed copy (its watches start from them, no LIST of their own), the check reads no budgets,
and the first pass LISTs nodes and driver pods once more because it has just taken the lease (another
replica may have written until then: docs/operations.md, "How a pass reads the cluster")."""

from __future__ import annotations

import threading
import time
from collections import Counter

from kubernetes import client as k8s

from upgrader.controller.runner import build_controller, check_policy_against_cluster, make_cache, start_watches
from upgrader.controller.settings import Settings
from upgrader.core.policy import Policy
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

NODES, DRIVER_PODS = "/api/v1/nodes", "/api/v1/namespaces/gpu-operator/pods"
DAEMONSETS = "/apis/apps/v1/namespaces/gpu-operator/daemonsets"
REVISIONS = "/apis/apps/v1/namespaces/gpu-operator/controllerrevisions"
BUDGETS = "/apis/policy/v1/poddisruptionbudgets"


def test_the_start_lists_each_collection_at_most_twice_and_the_watches_start_from_the_check() -> None:
    cluster = EmulatedCluster()
    build(cluster, "healthy")
    url = cluster.serve()
    stop, wake = threading.Event(), threading.Event()
    try:
        controller = build_controller(k8s.ApiClient(k8s.Configuration(host=url)), Policy(), Settings(identity="start"))
        make_cache(controller, wake)
        check_policy_against_cluster(controller)
        cache = start_watches(controller, stop, wake)
        deadline = time.monotonic() + 30
        while not (cache.nodes.synced and cache.driver_pods.synced) and time.monotonic() < deadline:
            time.sleep(0.01)
        report = controller.reconcile()
        assert report.error is None
        lists = Counter(r.path for r in cluster.requests if r.verb == "list")
        watches = Counter(r.path for r in cluster.requests if r.verb == "watch")
        # the check and the first pass; the watch of each followed on from the check's list
        assert (lists[NODES], lists[DRIVER_PODS], lists[DAEMONSETS], lists[REVISIONS]) == (2, 2, 2, 2)
        assert lists[BUDGETS] == 1, "the budgets are read by the first pass only"
        assert watches[NODES] >= 1 and watches[DRIVER_PODS] >= 1
        check_version = next(r for r in cluster.requests if r.verb == "list" and r.path == NODES)
        first_watch = next(r for r in cluster.requests if r.verb == "watch" and r.path == NODES)
        assert check_version.seq < first_watch.seq
    finally:
        stop.set()
        cluster.stop()
