"""The fast room model (core/node/gpu_room.py) says exactly what the whole-fleet scan said (capacity_reference.py),
on random fleets: nodes cordoned, not Ready, tainted, with GPUs, MIG slices or both; pods with selectors,
affinities (readable or not), tolerations, one resource or two; judged with random wave mates."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties.capacity_reference import reference_shortage
from upgrader.core.model.placement import Taint, Toleration
from upgrader.core.model.views import NodeView, PodView
from upgrader.core.node.capacity import shortage
from upgrader.core.node.gpu_room import Room

GPU, MIG = "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
TAINTS = [(), (Taint("gpu", "true", "NoSchedule"),), (Taint("maint", "", "NoExecute"),),
          (Taint("soft", "", "PreferNoSchedule"),)]
AFFINITIES: list[dict[str, Any] | None] = [
    None,
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}},
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n03", "n07"]}]},
        {"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]}]}}},
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "oops"}}},
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["2"]}]}]}}},
]
TOLERATIONS = [(), (Toleration("gpu", "Exists", "", ""),), (Toleration("", "Exists", "", ""),)]


@st.composite
def nodes(draw: st.DrawFn) -> tuple[dict[str, NodeView], dict[str, dict[str, int]]]:
    count = draw(st.integers(1, 14))
    views, room = {}, {}
    for i in range(count):
        name = f"n{i:02d}"
        allocatable = {}
        for resource in (GPU, MIG):
            if draw(st.booleans()):
                allocatable[resource] = draw(st.integers(0, 8))
        labels = {"zone": draw(st.sampled_from(["a", "b", "c"])), "rank": str(draw(st.integers(0, 4)))}
        if draw(st.booleans()):
            labels["pool"] = draw(st.sampled_from(["x", "y"]))
        cordoned, ready = draw(st.sampled_from([False, False, True])), draw(st.sampled_from([True, True, False]))
        views[name] = NodeView(name, "1", labels, {}, cordoned, ready, None, None, "k", "os", None,
                               taints=draw(st.sampled_from(TAINTS)), allocatable=allocatable)
        if allocatable:
            room[name] = {r: draw(st.integers(0, a)) for r, a in allocatable.items()}
    return views, room


@st.composite
def evicted(draw: st.DrawFn, node: str) -> list[PodView]:
    pods = []
    for i in range(draw(st.integers(0, 7))):
        requests = draw(st.sampled_from([{GPU: 1}, {GPU: 2}, {GPU: 4}, {MIG: 1}, {MIG: 3}, {GPU: 1, MIG: 1}, {}]))
        selector = draw(st.sampled_from([{}, {"pool": "x"}, {"zone": "c"}]))
        pods.append(PodView(
            "ml", f"p{i}-{draw(st.integers(0, 99))}", f"u{i}", node, {}, {}, "Running", True, False,
            requests.get(GPU, 0), draw(st.sampled_from(["ReplicaSet", "StatefulSet", "Job", None, "DaemonSet"])),
            "owner", False, False, affinity=draw(st.sampled_from(AFFINITIES)), gpu_requests=requests,
            node_selector=selector, tolerations=draw(st.sampled_from(TOLERATIONS))))
    return pods


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_fast_model_says_what_the_whole_fleet_scan_said(data: st.DataObject) -> None:
    views, room = data.draw(nodes())
    model = Room(views, room)
    for name in sorted(views):
        pods = data.draw(evicted(name))
        together = set(data.draw(st.lists(st.sampled_from(sorted(views)), max_size=4)))
        expected = reference_shortage(name, pods, views, room, together, "upgraded with it in wave 2")
        assert shortage(name, pods, model, together, "upgraded with it in wave 2") == expected


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_model_updated_for_the_nodes_that_changed_says_what_one_built_afresh_says(data: st.DataObject) -> None:
    """The controller keeps the model between passes and updates it for the nodes whose view or pods
    changed (came, went, cordoned, relabelled, other room): judged after that, as the scan judges."""
    (before, room_before), (after, room_after) = data.draw(nodes()), data.draw(nodes())
    model = Room(before, room_before)
    for name in sorted(before):  # the orders and shapes the first pass built are the ones updated
        shortage(name, data.draw(evicted(name)), model, set(data.draw(st.lists(st.sampled_from(sorted(before))))))
    names = sorted(before.keys() | after.keys())
    changed = set(data.draw(st.lists(st.sampled_from(names))))
    views = {n: (after if n in changed else before)[n] for n in names if n in (after if n in changed else before)}
    room = {n: (room_after if n in changed else room_before)[n] for n in views
            if n in (room_after if n in changed else room_before)}
    model.update(views, room, changed)
    fresh = Room(views, room)  # every order the kept model holds is the one a new model builds
    for (shape, resource), order in model._shape_order.items():
        assert order == fresh._shape_by_room(model._judge[shape], shape, resource)
        assert model._eligible[shape][0] == fresh._eligible[shape][0]
    for resource, order in model._by_room.items():
        assert (order, model._holders[resource], model._total[resource]) == (
            fresh._resource(resource), fresh._holders[resource], fresh._total[resource])
    assert model.available == fresh.available
    for name in sorted(views):
        pods = data.draw(evicted(name))
        together = set(data.draw(st.lists(st.sampled_from(sorted(views)), max_size=4)))
        expected = reference_shortage(name, pods, views, room, together, "starting with it")
        assert shortage(name, pods, model, together, "starting with it") == expected
