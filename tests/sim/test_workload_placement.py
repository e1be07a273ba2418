"""Where the emulator's scheduler puts a recreated ReplicaSet pod, and what it says when it cannot:
kube-scheduler v1.32's filters (cordon, taints and tolerations, nodeSelector and required node
affinity, free GPUs and MIG slices) and its `PodScheduled` message, on a virtual clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.sim.builders import node_body
from upgrader.sim.cluster import EmulatedCluster

Obj = dict[str, Any]
NS = "ml"
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
NOT_HELPFUL_1 = "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
NO_VICTIMS_1 = "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}


@pytest.fixture
def cluster() -> EmulatedCluster:
    cluster = EmulatedCluster.virtual()
    cluster.create("namespaces", {"metadata": {"name": NS}})
    return cluster


def add_node(cluster: EmulatedCluster, name: str, gpus: int = 8, labels: dict[str, str] | None = None,
             taints: list[Obj] | None = None, ready: str = "True", cordoned: bool = False,
             allocatable: dict[str, str] | None = None) -> None:  # fmt: skip
    body = node_body(name, labels, gpus)
    body["spec"] = {"taints": taints or [], "unschedulable": cordoned}
    body["status"]["conditions"] = [{"type": "Ready", "status": ready}]
    body["status"]["allocatable"].update(allocatable or {})
    cluster.create("nodes", body)


def add_pod(cluster: EmulatedCluster, name: str, node: str, requests: dict[str, int] | None = None,
            owned: bool = True, **spec: Any) -> None:  # fmt: skip
    """A running pod on `node` (owned by ReplicaSet `name` unless `owned` is False), holding `requests`."""
    amounts = {r: str(n) for r, n in (requests if requests is not None else {GPU: 1}).items()}
    meta: Obj = {"name": name, "labels": {"app": name}}
    if owned:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": f"uid-{name}", "controller": True}
        ]
    container = {"name": "main", "image": "app:1", "resources": {"requests": amounts, "limits": amounts}}
    body = {
        "metadata": meta,
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [container], **spec},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    cluster.create("pods", body, NS)


def delete(cluster: EmulatedCluster, name: str) -> None:
    cluster.store.delete(cluster.type("pods"), NS, name, grace_seconds=0)


def replacement(cluster: EmulatedCluster, app: str) -> Obj:
    (pod,) = [p for p in cluster.store.objects(cluster.type("pods"), NS) if p["metadata"]["labels"] == {"app": app}]
    assert pod["metadata"]["name"] != app  # a new pod, not the one deleted
    return pod


def evict(cluster: EmulatedCluster, app: str) -> Obj:
    """Delete the workload pod and let the scheduler have its go (no retry yet: that is 2 s later)."""
    delete(cluster, app)
    cluster.advance(0)
    return replacement(cluster, app)


def where(pod: Obj) -> str | None:
    return pod["spec"].get("nodeName")


def why(pod: Obj) -> str:
    (cond,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    return str(cond["message"])


def taint_message(key: str, value: str = "") -> str:
    return f"0/1 nodes are available: 1 node(s) had untolerated taint {{{key}: {value}}}. {NOT_HELPFUL_1}"


AFFINITY_1 = f"0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. {NOT_HELPFUL_1}"

# ----- taints and tolerations -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("taint", "toleration", "lands"),
    [
        (TAINT, {"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}, True),
        (TAINT, {"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"}, False),
        (TAINT, {"key": "dedicated", "value": "infer"}, True),  # operator defaults to Equal, any effect
        (TAINT, {"key": "dedicated", "value": "train"}, False),
        (TAINT, {"key": "dedicated"}, False),  # Equal with no value: the taint's value differs
        (TAINT, {"key": "dedicated", "operator": "Exists"}, True),
        (TAINT, {"key": "other", "operator": "Exists"}, False),
        (TAINT, {"operator": "Exists"}, True),  # empty key with Exists tolerates every taint
        ({**TAINT, "effect": "NoExecute"}, {"key": "dedicated", "operator": "Exists"}, True),  # empty effect: all
        ({**TAINT, "effect": "NoExecute"}, {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "gpu", "effect": "NoSchedule"}, {"key": "gpu", "operator": "Equal", "effect": "NoSchedule"}, True),
        ({**TAINT, "effect": "PreferNoSchedule"}, None, True),  # only scores, never blocks
    ],
)
def test_a_taint_keeps_off_the_pods_that_do_not_tolerate_it(
    cluster: EmulatedCluster, taint: Obj, toleration: Obj | None, lands: bool
) -> None:
    add_node(cluster, "n1", taints=[taint])
    add_pod(cluster, "app", "n1", tolerations=[toleration] if toleration else [])
    pod = evict(cluster, "app")
    if lands:
        assert where(pod) == "n1"
    else:
        assert where(pod) is None
        assert why(pod) == taint_message(taint["key"], taint.get("value", ""))


def test_the_first_untolerated_taint_in_the_nodes_order_is_named(cluster: EmulatedCluster) -> None:
    taints = [
        {"key": "soft", "effect": "PreferNoSchedule"},
        {"key": "tolerated", "effect": "NoSchedule"},
        {"key": "zeta", "value": "1", "effect": "NoExecute"},
        {"key": "alpha", "value": "2", "effect": "NoSchedule"},
    ]
    add_node(cluster, "n1", taints=taints)
    add_pod(cluster, "app", "n1", tolerations=[{"key": "tolerated", "operator": "Exists"}])
    assert why(evict(cluster, "app")) == taint_message("zeta", "1")


def test_a_node_that_is_not_ready_has_the_lifecycle_controllers_taint(cluster: EmulatedCluster) -> None:
    add_node(cluster, "down", ready="False")
    add_node(cluster, "lost", ready="Unknown")
    add_pod(cluster, "app", "down")
    pod = evict(cluster, "app")
    assert why(pod) == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    tolerant = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"}]
    add_pod(cluster, "tolerant", "down", tolerations=tolerant)
    assert where(evict(cluster, "tolerant")) == "lost"


def test_a_pod_tolerating_the_unschedulable_taint_goes_to_a_cordoned_node(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1", cordoned=True)
    add_pod(cluster, "plain", "n1")
    add_pod(cluster, "tolerant", "n1", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])
    assert why(evict(cluster, "plain")) == f"0/1 nodes are available: 1 node(s) were unschedulable. {NOT_HELPFUL_1}"
    assert where(evict(cluster, "tolerant")) == "n1"


# ----- node affinity ----------------------------------------------------------------------------

LABELS = {"zone": "a", "gpu-count": "8", "tier": "x1"}


def required(*terms: Obj) -> Obj:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, op: str, *values: str) -> Obj:
    return {"key": key, "operator": op, "values": list(values)} if values else {"key": key, "operator": op}


def labels_(*exprs: Obj) -> Obj:
    return {"matchExpressions": list(exprs)}


def named(op: str, name: str, *exprs: Obj) -> Obj:
    term: Obj = {"matchFields": [expr("metadata.name", op, name)]}
    return {**term, **labels_(*exprs)} if exprs else term


PREFERRED_B = {"weight": 1, "preference": labels_(expr("zone", "In", "b"))}


@pytest.mark.parametrize(
    ("affinity", "lands"),
    [
        (required({"matchExpressions": [expr("zone", "In", "b", "a")]}), True),
        (required({"matchExpressions": [expr("zone", "In", "b")]}), False),
        (required({"matchExpressions": [expr("zone", "In", "a"), expr("missing", "Exists")]}), False),  # ANDed
        (required({"matchExpressions": [expr("zone", "NotIn", "b")]}), True),
        (required({"matchExpressions": [expr("zone", "NotIn", "a")]}), False),
        (required({"matchExpressions": [expr("missing", "NotIn", "a")]}), True),  # an absent label is not in
        (required({"matchExpressions": [expr("zone", "Exists")]}), True),
        (required({"matchExpressions": [expr("missing", "Exists")]}), False),
        (required({"matchExpressions": [expr("missing", "DoesNotExist")]}), True),
        (required({"matchExpressions": [expr("zone", "DoesNotExist")]}), False),
        (required({"matchExpressions": [expr("gpu-count", "Gt", "7")]}), True),
        (required({"matchExpressions": [expr("gpu-count", "Gt", "8")]}), False),  # strictly greater
        (required({"matchExpressions": [expr("gpu-count", "Lt", "9")]}), True),
        (required({"matchExpressions": [expr("gpu-count", "Lt", "8")]}), False),
        (required({"matchExpressions": [expr("tier", "Gt", "0")]}), False),  # "x1" is no integer
        (required({"matchExpressions": [expr("missing", "Lt", "100")]}), False),
        (required({"matchExpressions": [expr("gpu-count", "Gt", "seven")]}), False),  # a bad term matches nothing
        (required(named("NotIn", "n1")), False),
        (required(named("NotIn", "n2")), True),
        (required(named("In", "n1", expr("zone", "In", "a"))), True),
        (required(named("In", "n1", expr("zone", "In", "b"))), False),  # fields and labels ANDed
        (required(labels_(expr("zone", "In", "b")), labels_(expr("tier", "Exists"))), True),  # terms ORed
        (required({}), False),  # an empty term matches nothing
        (required(), False),  # so does a required block without terms
        (required({"matchExpressions": [expr("zone", "In", "b")]}, {}), False),
        ({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [PREFERRED_B]}}, True),  # ignored
    ],
)
def test_required_node_affinity_decides_where_a_pod_may_run(
    cluster: EmulatedCluster, affinity: Obj, lands: bool
) -> None:
    add_node(cluster, "n1", labels=LABELS)
    add_pod(cluster, "app", "n1", affinity=affinity)
    pod = evict(cluster, "app")
    if lands:
        assert where(pod) == "n1"
    else:
        assert where(pod) is None
        assert why(pod) == AFFINITY_1


def test_node_selector_and_affinity_must_both_match(cluster: EmulatedCluster) -> None:
    add_node(cluster, "n1", labels=LABELS)
    affinity = required({"matchExpressions": [expr("zone", "In", "a")]})
    add_pod(cluster, "app", "n1", affinity=affinity, nodeSelector={"tier": "x2"})
    assert why(evict(cluster, "app")) == AFFINITY_1


BOTH_NAMES = {"matchFields": [expr("metadata.name", "In", "n1"), expr("metadata.name", "In", "n2")]}


@pytest.mark.parametrize(
    ("terms", "said"),
    [  # NodeAffinity's PreFilter: unnamed nodes are not looked at; names that cannot all hold end it
        ([named("In", "gone")], "1 node(s) didn't satisfy plugin(s) [NodeAffinity]."),
        ([named("In", "n2"), named("In", "n1")], "1 node(s) were unschedulable."),  # named: filtered as usual
        ([BOTH_NAMES], "pod affinity terms conflict."),
    ],
)
def test_pods_pinned_by_node_name(cluster: EmulatedCluster, terms: list[Obj], said: str) -> None:
    add_node(cluster, "n1", cordoned=True)
    add_pod(cluster, "app", "n1", affinity=required(*terms))
    assert why(evict(cluster, "app")) == f"0/1 nodes are available: {said} {NOT_HELPFUL_1}"


def test_affinity_picks_the_node_even_when_another_has_more_room(cluster: EmulatedCluster) -> None:
    add_node(cluster, "big", gpus=8, labels={"zone": "a"})
    add_node(cluster, "small", gpus=2, labels={"zone": "b"})
    add_pod(cluster, "app", "big", affinity=required({"matchExpressions": [expr("zone", "In", "b")]}))
    assert where(evict(cluster, "app")) == "small"
    add_pod(cluster, "free", "small")
    assert where(evict(cluster, "free")) == "big"  # unconstrained: the most free GPUs


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
    retries = [t for t in cluster.store.scheduler.pending() if t.name == "retry pending pods"]
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
    timers = [t.name for t in cluster.store.scheduler.pending()]
    assert timers.count("schedule pending pods") == 1
    cluster.advance(0)
    assert [t.name for t in cluster.store.scheduler.pending()].count("retry pending pods") == 1
    cluster.advance(1)
    cluster.store.mutate(cluster.type("nodes"), None, "n1", lambda n: n["metadata"]["labels"].update(team="x"))
    cluster.advance(0)  # a pass of its own: the retry already armed stays the only one
    assert [t.name for t in cluster.store.scheduler.pending()].count("retry pending pods") == 1


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
    assert "schedule pending pods" not in [t.name for t in cluster.store.scheduler.pending()]


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
