"""Where the emulator's scheduler puts a recreated ReplicaSet pod, and what it says when it cannot:
kube-scheduler v1.32's node filters (cordon, taints and tolerations, nodeSelector and required node
affinity) and its `PodScheduled` message, on a virtual clock. Free GPUs and MIG slices, the
message's parts and what lets a waiting pod in are in test_workload_placement_unschedulable.py."""

from __future__ import annotations

import pytest

from tests.sim.placement_helpers import (
    NOT_HELPFUL_1,
    TAINT,
    Obj,
    add_node,
    add_pod,
    evict,
    taint_message,
    where,
    why,
)
from tests.sim.placement_helpers import cluster as cluster
from upgrader.sim.cluster import EmulatedCluster

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
