"""Room for evicted GPU pods (`core.capacity`) and where a pod may land (`core.placement`)."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.placement import Taint, Toleration, affinity_admits, gpu_requests, untolerated
from upgrader.core.model.views import NodeView, PodView, node_view, pod_view
from upgrader.core.node.capacity import free_capacity, room_by_node, shortage
from upgrader.core.node.gpu_room import Room, RoomMemo


def node(name: str, gpus: int = 8, *, ready: bool = True, unschedulable: bool = False,
         labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         extra: dict[str, str] | None = None) -> NodeView:
    alloc = {"cpu": "64", "nvidia.com/gpu": str(gpus), **(extra or {})}
    return node_view({
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    })


def pod(name: str, where: str, resources: dict[str, str], owner: str | None = "ReplicaSet",
        phase: str = "Running", **spec: Any) -> PodView:
    meta: dict[str, Any] = {"name": name, "namespace": "ml"}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner, "name": f"{name}-owner", "controller": True}]
    containers = [{"name": "c", "resources": {"limits": resources}}]
    return pod_view({"metadata": meta, "spec": {"nodeName": where, "containers": containers, **spec},
                     "status": {"phase": phase}})


def judge(evicted: list[PodView], others: list[NodeView], on: dict[str, list[PodView]] | None = None,
          waves: dict[str, int | None] | None = None) -> str | None:
    nodes = {n.name: n for n in [node("up"), *others]}
    together = {name for name, wave in (waves or {}).items() if wave == 1 and name != "up"}
    model = Room(nodes, room_by_node(nodes, on or {}))
    return shortage("up", evicted, model, together, "upgraded with it in wave 1")


def test_views_carry_what_placement_reads() -> None:
    n = node("a", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}], extra={"nvidia.com/mig-1g.10gb": "7"})
    assert n.allocatable == {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 7}
    assert n.taints == (Taint("k", "v", "NoSchedule"),)
    p = pod("p", "a", {"nvidia.com/gpu": "2"}, nodeSelector={"zone": "x"},
            tolerations=[{"key": "k", "operator": "Exists"}])
    assert (p.gpu_requests, p.node_selector) == ({"nvidia.com/gpu": 2}, {"zone": "x"})
    assert p.tolerations == (Toleration("k", "Exists", "", ""),)


def test_gpu_requests_sum_containers_and_take_the_larger_init_container() -> None:
    spec = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}},
                           {"resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}}],
            "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4", "nvidia.com/mig-1g.10gb": "1"}}}]}
    assert gpu_requests(spec) == {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 1}


@pytest.mark.parametrize(("toleration", "tolerated"), [
    (Toleration("", "Exists", "", ""), True),
    (Toleration("k", "Exists", "", ""), True),
    (Toleration("k", "Equal", "v", "NoSchedule"), True),
    (Toleration("k", "Equal", "other", ""), False),
    (Toleration("k", "Exists", "", "NoExecute"), False),
])
def test_tolerations(toleration: Toleration, tolerated: bool) -> None:
    taint = Taint("k", "v", "NoSchedule")
    assert (untolerated((taint,), (toleration,)) == []) is tolerated


def test_prefer_no_schedule_taints_do_not_keep_pods_off() -> None:
    assert untolerated((Taint("k", "", "PreferNoSchedule"),), ()) == []


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(("affinity", "admitted"), [
    (None, True),
    ({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}, True),
    (_required({"matchExpressions": [_expr("zone", "In", "a", "b"), _expr("gpus", "Gt", "4")]}), True),
    (_required({"matchExpressions": [_expr("zone", "In", "a"), _expr("gpus", "Lt", "8")]}), False),
    (_required({"matchExpressions": [_expr("zone", "NotIn", "a")]}, {"matchExpressions": [_expr("spot", "Exists")]}),
     False),
    (_required({"matchExpressions": [_expr("spot", "DoesNotExist")]}), True),
    (_required({"matchExpressions": [_expr("gpus", "Gt", "many")]}), False),
    (_required({"matchFields": [_expr("metadata.name", "In", "n1")]}), True),
    (_required({}), False),
    (_required(), False),
])
def test_required_node_affinity(affinity: dict[str, Any] | None, admitted: bool) -> None:
    assert affinity_admits(affinity, {"zone": "a", "gpus": "8"}, "n1") is admitted


def test_terminal_pods_hold_nothing() -> None:
    n = node("a")
    assert free_capacity(n, [pod("x", "a", {"nvidia.com/gpu": "3"}),
                             pod("y", "a", {"nvidia.com/gpu": "5"}, phase="Succeeded")]) == {"nvidia.com/gpu": 5}


def test_largest_first_best_fit_places_what_first_fit_would_not() -> None:
    # Smallest first would put the 1-GPU pod on b (2 free) and leave the 2-GPU pod nowhere.
    evicted = [pod("small", "up", {"nvidia.com/gpu": "1"}), pod("big", "up", {"nvidia.com/gpu": "2"})]
    assert judge(evicted, [node("b", 2), node("c", 1)]) is None


def test_daemonset_bare_and_job_pods_need_no_room() -> None:
    evicted = [pod("ds", "up", {"nvidia.com/gpu": "1"}, owner="DaemonSet"),
               pod("bare", "up", {"nvidia.com/gpu": "1"}, owner=None),
               pod("job", "up", {"nvidia.com/gpu": "1"}, owner="Job")]
    assert judge(evicted, [node("b", 0)]) is None


def test_not_ready_and_same_wave_nodes_are_named_unavailable() -> None:
    evicted = [pod("w", "up", {"nvidia.com/gpu": "2"}), pod("bare", "up", {"nvidia.com/gpu": "1"}, owner=None)]
    others = [node("b", ready=False), node("c"), node("d", 0), node("e", 1)]
    assert judge(evicted, others, waves={"up": 1, "c": 1, "e": 2}) == (
        "1 evicted GPU pod(s) would stay Pending, no node they may run on having room: ml/w (nvidia.com/gpu 2); "
        "free on available nodes: nvidia.com/gpu 1 (e 1); counted unavailable: b (not Ready), "
        "c (upgraded with it in wave 1); not counted, nothing recreates them elsewhere: ml/bare (no controller)"
    )


def test_dra_only_pods_are_not_checked() -> None:
    claim = pod("dra", "up", {}, resourceClaims=[{"name": "gpu", "resourceClaimName": "dra-gpu"}])
    assert judge([claim], [node("b", 0)]) is None


def test_the_room_kept_between_passes_is_the_room_worked_out_again() -> None:
    """room_by_node's memo (the controller's, between passes) reuses a node's room only while its
    view and its pods are the very objects it came from."""
    nodes = {n.name: n for n in (node("a"), node("b"), node("c", gpus=4))}
    on = {"a": [pod("p", "a", {"nvidia.com/gpu": "3"})], "b": [pod("q", "b", {"nvidia.com/gpu": "8"})]}
    memo = RoomMemo()
    assert room_by_node(nodes, on, memo) == room_by_node(nodes, on)
    kept = dict(memo.room)
    again = room_by_node(nodes, on, memo)
    assert all(again[n] is kept[n] for n in nodes), "the same objects: the same answers, not worked out"
    on = {**on, "a": [*on["a"], pod("r", "a", {"nvidia.com/gpu": "2"})]}  # a new list: a pod came
    nodes = {**nodes, "c": node("c", gpus=2)}  # a new view: the node changed
    moved = room_by_node(nodes, on, memo)
    assert moved == room_by_node(nodes, on)
    assert moved["a"] == {"nvidia.com/gpu": 3} and moved["c"] == {"nvidia.com/gpu": 2}
    assert moved["b"] is kept["b"]


def test_room_by_node_with_a_memo_names_the_nodes_whose_room_may_have_moved() -> None:
    a, b, c = node("a"), node("b"), node("c")
    pods = {"a": [pod("p", "a", {"nvidia.com/gpu": "2"})], "b": []}
    memo = RoomMemo()
    first: set[str] = set()
    assert room_by_node({"a": a, "b": b}, pods, memo, first) == {
        "a": {"nvidia.com/gpu": 6}, "b": {"nvidia.com/gpu": 8}}
    assert first == {"a", "b"}
    same: set[str] = set()
    room_by_node({"a": a, "b": b}, pods, memo, same)
    assert same == set()  # the very views and pod lists: nothing to judge again
    moved: set[str] = set()
    b2 = node("b", unschedulable=True)
    room_by_node({"b": b2, "c": c}, {**pods, "c": []}, memo, moved)
    assert moved == {"a", "b", "c"}  # a went, b has a new view, c came
