"""A recreated ReplicaSet pod the emulator's scheduler cannot place, on a virtual clock: free GPUs
and MIG slices, kube-scheduler v1.32's `PodScheduled` message (its counts, order and preemption
part), when that condition is written and retried, and the changes that let a waiting pod land."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.sim.placement_helpers import (
    GPU,
    MIG,
    NO_VICTIMS_1,
    NS,
    TAINT,
    Obj,
    add_node,
    add_pod,
    delete,
    evict,
    replacement,
    taint_message,
    where,
    why,
)
from tests.sim.placement_helpers import cluster as cluster
from upgrader.sim.cluster import EmulatedCluster

# ----- resources --------------------------------------------------------------------------------


def test_mig_slices_are_counted_per_profile(cluster: EmulatedCluster) -> None:
    add_node(cluster, "mig", gpus=1, allocatable={MIG: "7"})
    add_node(cluster, "whole", gpus=8)
    add_pod(cluster, "holder", "mig", {MIG: 5}, owned=False)
    add_pod(cluster, "app", "mig", {MIG: 3})
    assert why(evict(cluster, "app")) == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )
    add_pod(cluster, "small", "whole", {MIG: 2})
    assert where(evict(cluster, "small")) == "mig"  # 7 - 5 left 2


def test_each_short_resource_of_a_node_is_counted(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1", gpus=1, allocatable={MIG: "1"})
    add_pod(cluster, "app", "n1", {GPU: 2, MIG: 2})
    assert why(evict(cluster, "app")) == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu, 1 Insufficient nvidia.com/mig-1g.10gb. "
        + NO_VICTIMS_1
    )


def test_a_terminating_pod_still_holds_its_gpus_and_a_finished_one_does_not(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1", gpus=2)
    add_pod(cluster, "done", "n1", {GPU: 1}, owned=False)
    cluster.store.mutate(cluster.type("pods"), NS, "done", lambda p: p["status"].update(phase="Succeeded"))
    add_pod(cluster, "leaving", "n1", {GPU: 1}, owned=False, terminationGracePeriodSeconds=30)
    cluster.store.delete(cluster.type("pods"), NS, "leaving")  # terminating for 30 s
    add_pod(cluster, "app", "n1", {GPU: 2})
    pod = evict(cluster, "app")
    assert why(pod) == f"0/1 nodes are available: 1 Insufficient nvidia.com/gpu. {NO_VICTIMS_1}"
    cluster.advance(30)
    assert where(replacement(cluster, "app")) == "n1"


# ----- the message ------------------------------------------------------------------------------


def test_each_node_counts_once_under_the_first_filter_that_rejects_it(cluster: EmulatedCluster) -> None:
    add_node(cluster, "cordoned-and-tainted", cordoned=True, taints=[TAINT])
    add_node(cluster, "tainted-and-mislabelled", taints=[TAINT], labels={"pool": "cpu"})
    add_node(cluster, "mislabelled-and-full", gpus=0, labels={"pool": "cpu"})
    add_node(cluster, "full-1", gpus=1, labels={"pool": "gpu"})
    add_node(cluster, "full-2", gpus=1, labels={"pool": "gpu"})
    add_pod(cluster, "app", "full-1", {GPU: 2}, nodeSelector={"pool": "gpu"})
    pod = evict(cluster, "app")
    assert why(pod) == (
        "0/5 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {dedicated: infer}, 1 node(s) were unschedulable, "
        "2 Insufficient nvidia.com/gpu. preemption: 0/5 nodes are available: "
        "2 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
    )


def test_reasons_sort_as_strings_as_kube_scheduler_prints_them(cluster: EmulatedCluster) -> None:
    for i in range(10):
        add_node(cluster, f"full-{i}", gpus=0)
    add_node(cluster, "t1", taints=[TAINT])
    add_node(cluster, "t2", taints=[TAINT])
    add_pod(cluster, "app", "full-0", {GPU: 1})
    assert why(evict(cluster, "app")) == (
        "0/12 nodes are available: 10 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint {dedicated: infer}. "
        "preemption: 0/12 nodes are available: 10 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )


@pytest.mark.parametrize(
    ("wanted", "spec", "part"),
    [
        # Evicting "low" would leave 1 GPU, not 2: the dry run still fails on resources.
        (2, {}, " preemption: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."),
        # Evicting "low" or "peer" would make room: kube-scheduler preempts, and says no more.
        (1, {"priority": 100}, ""),
        (1, {"priority": 100, "preemptionPolicy": "Never"}, " preemption: not eligible due to preemptionPolicy=Never."),
    ],
)
def test_the_preemption_part_follows_priorities(
    cluster: EmulatedCluster, wanted: int, spec: dict[str, Any], part: str
) -> None:
    add_node(cluster, "n1", gpus=2)
    add_pod(cluster, "low", "n1", {GPU: 1}, owned=False, priority=-10)
    add_pod(cluster, "peer", "n1", {GPU: 1}, owned=False)
    add_pod(cluster, "app", "n1", {GPU: wanted}, **spec)
    delete(cluster, "peer")
    cluster.advance(0)
    add_pod(cluster, "peer", "n1", {GPU: 1}, owned=False)  # back before the replacement could land
    pod = evict(cluster, "app")
    assert why(pod) == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu." + part


def test_with_no_nodes_at_all_the_scheduler_says_so(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1")
    add_pod(cluster, "app", "n1")
    cluster.store.remove(cluster.type("nodes"), cluster.get("nodes", "n1") or {})  # its pods go with it
    cluster.advance(0)
    assert why(replacement(cluster, "app")) == "no nodes available to schedule pods"


def test_the_condition_is_written_only_when_the_message_changes(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1", taints=[TAINT])
    add_pod(cluster, "app", "n1")
    pod = evict(cluster, "app")
    written, since = pod["metadata"]["resourceVersion"], pod["status"]["conditions"][0]["lastTransitionTime"]
    cluster.advance(60)  # thirty retries, nothing changed
    pod = replacement(cluster, "app")
    assert pod["metadata"]["resourceVersion"] == written
    retries = [t for t in cluster.store.timers.pending() if t.name == "retry pending pods"]
    assert len(retries) == 1
    cluster.store.mutate(cluster.type("nodes"), None, "n1", lambda n: n["spec"].update(taints=[{**TAINT, "key": "x"}]))
    cluster.advance(2)
    pod = replacement(cluster, "app")
    assert why(pod) == taint_message("x", "infer")
    assert pod["status"]["conditions"][0]["lastTransitionTime"] == since  # still False since then


def test_many_evictions_at_once_share_one_pass_and_one_retry(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1", gpus=4, taints=[TAINT])
    for i in range(4):
        add_pod(cluster, f"app-{i}", "n1")
    for i in range(4):
        delete(cluster, f"app-{i}")
    timers = [t.name for t in cluster.store.timers.pending()]
    assert timers.count("schedule pending pods") == 1
    cluster.advance(0)
    assert [t.name for t in cluster.store.timers.pending()].count("retry pending pods") == 1
    cluster.advance(1)
    cluster.store.mutate(cluster.type("nodes"), None, "n1", lambda n: n["metadata"]["labels"].update(team="x"))
    cluster.advance(0)  # a pass of its own: the retry already armed stays the only one
    assert [t.name for t in cluster.store.timers.pending()].count("retry pending pods") == 1


# ----- what lets a waiting pod in ---------------------------------------------------------------


def edit(cluster: EmulatedCluster, plural: str, name: str, change: Callable[[Obj], Any]) -> None:
    cluster.store.mutate(cluster.type(plural), None if plural == "nodes" else NS, name, change)


def node_edit(change: Callable[[Obj], Any]) -> Callable[[EmulatedCluster], None]:
    return lambda c: edit(c, "nodes", "n1", change)


POOL_GPU = {"nodeSelector": {"pool": "gpu"}}


@pytest.mark.parametrize(
    ("node", "spec", "change"),
    [
        ({"taints": [TAINT]}, {}, node_edit(lambda n: n["spec"].update(taints=[]))),
        ({"cordoned": True}, {}, node_edit(lambda n: n["spec"].update(unschedulable=False))),
        ({"ready": "False"}, {}, node_edit(lambda n: n["status"]["conditions"][0].update(status="True"))),
        ({"labels": {"pool": "cpu"}}, POOL_GPU, node_edit(lambda n: n["metadata"]["labels"].update(pool="gpu"))),
        ({"gpus": 0}, {}, node_edit(lambda n: n["status"]["allocatable"].update({GPU: "2"}))),
        ({"taints": [TAINT]}, {}, lambda c: add_node(c, "n2")),
        ({"gpus": 2}, {}, lambda c: delete(c, "holder")),
        ({"gpus": 2}, {}, lambda c: edit(c, "pods", "holder", lambda p: p["status"].update(phase="Failed"))),
    ],
    ids=["untainted", "uncordoned", "ready", "relabelled", "allocatable", "new-node", "pod-gone", "pod-failed"],
)
def test_a_waiting_pod_lands_as_soon_as_a_node_would_take_it(
    cluster: EmulatedCluster, node: dict[str, Any], spec: Obj, change: Callable[[EmulatedCluster], None]
) -> None:
    add_node(cluster, "n1", **node)
    add_pod(cluster, "holder", "n1", {GPU: 1}, owned=False)  # on a 2-GPU node the app needs it gone
    add_pod(cluster, "app", "n1", {GPU: 2 if node.get("gpus") == 2 else 1}, **spec)
    assert where(evict(cluster, "app")) is None
    cluster.advance(1)  # between retries: what lands the pod is the change, not the timer
    change(cluster)
    cluster.advance(0)
    assert where(replacement(cluster, "app")) == ("n2" if cluster.get("nodes", "n2") else "n1")


def test_a_change_that_admits_nothing_more_leaves_the_pod_to_the_retry(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1", taints=[TAINT])
    add_pod(cluster, "app", "n1")
    evict(cluster, "app")
    cluster.advance(1)
    edit(cluster, "nodes", "n1", lambda n: n["spec"].update(podCIDR="10.0.0.0/24"))
    assert "schedule pending pods" not in [t.name for t in cluster.store.timers.pending()]


def test_adding_a_toleration_to_the_waiting_pod_lets_it_land(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1", taints=[TAINT])
    add_pod(cluster, "app", "n1")
    pod = evict(cluster, "app")
    cluster.advance(1)
    tolerate = [{"key": "dedicated", "operator": "Exists"}]
    edit(cluster, "pods", pod["metadata"]["name"], lambda p: p["spec"].update(tolerations=tolerate))
    cluster.advance(0)
    assert where(replacement(cluster, "app")) == "n1"


def test_pods_loaded_in_bulk_are_found_by_the_next_pass(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1", taints=[TAINT])
    add_pod(cluster, "app", "n1")
    evict(cluster, "app")
    owner = [{"kind": "ReplicaSet", "name": "loaded", "uid": "u", "controller": True}]
    meta = {"name": "loaded", "namespace": NS, "ownerReferences": owner}
    spec = {"containers": [{"name": "main", "image": "app:1"}], "tolerations": [{"operator": "Exists"}]}
    cluster.load([{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}])  # no reactor sees this
    cluster.advance(2)  # the retry
    loaded = cluster.get("pods", "loaded", NS)
    assert loaded is not None and where(loaded) == "n1"
