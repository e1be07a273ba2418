"""The driver pods per node kept between passes (kube/pod_groups.py): updated from the keys the
watch-fed copy says changed, they are exactly the grouping built whole, and a node whose pods did
not change keeps its very list; the pods holding a ResourceClaim are known without a walk."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from upgrader.core.model.views import PodView, pod_view
from upgrader.kube.informer import Entry, Informer
from upgrader.kube.pod_groups import PodsByNode

Obj = dict[str, Any]
NODES = [f"gpu-{i}" for i in range(4)]
PODS = [f"driver-{i}" for i in range(8)]


def pod(name: str, node: str, version: int, claim: bool = False) -> Obj:
    meta = {"namespace": "gpu-operator", "name": name, "uid": name, "resourceVersion": str(version)}
    spec: Obj = {"nodeName": node}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def informer() -> Informer[PodView]:
    copy: Informer[PodView] = Informer(None, "/api/v1/namespaces/gpu-operator/pods", pod_view)  # type: ignore[arg-type]
    copy.absorb({"metadata": {"resourceVersion": "1"}, "items": []})
    copy._synced = True  # a copy listed once (the informer's own relist would need an API server)
    return copy


event = st.one_of(
    st.tuples(st.sampled_from(["ADDED", "MODIFIED"]), st.sampled_from(PODS), st.sampled_from(NODES), st.booleans()),
    st.tuples(st.just("DELETED"), st.sampled_from(PODS), st.just(""), st.just(False)),
    st.tuples(st.just("RELIST"), st.just(""), st.just(""), st.just(False)),
)


def whole(entries: Any) -> dict[str, list[str]]:
    return {node: [p.key for p in pods] for node, pods in PodsByNode().group(entries, None, False).items()}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(event, max_size=6), min_size=1, max_size=8))
def test_updated_from_changes_is_the_grouping_built_whole(passes: list[list[tuple[str, str, str, bool]]]) -> None:
    copy, groups, version = informer(), PodsByNode(), 1
    held: dict[str, Obj] = {}
    previous: dict[str, list[PodView]] = {}
    for batch in passes:
        for kind, name, node, claim in batch:
            version += 1
            if kind == "RELIST":  # the copy replaced whole by a newer list
                items = [{**o, "metadata": {**o["metadata"], "resourceVersion": str(version)}} for o in held.values()]
                copy.absorb({"metadata": {"resourceVersion": str(version)}, "items": items})
                continue
            if kind == "DELETED":
                gone = held.pop(name, None)
                if gone is not None:
                    copy.apply({"type": "DELETED", "object": gone})
                continue
            held[name] = pod(name, held[name]["spec"]["nodeName"] if name in held else node, version, claim)
            copy.apply({"type": "MODIFIED" if kind == "MODIFIED" and name in held else "ADDED", "object": held[name]})
        read = copy.read()
        assert read is not None
        entries, changed = read
        grouped = groups.group(entries, changed, True)
        assert {n: [p.key for p in ps] for n, ps in grouped.items()} == whole(entries)
        assert groups.claiming == {key for key, e in entries.items() if e.view.claims}
        if changed is None:
            previous = grouped
            continue
        moved = {entries[k].view.node for k in changed if k in entries}
        moved |= {n for n, ps in previous.items() if any(p.key in changed for p in ps)}
        for node, pods in grouped.items():
            if node not in moved and node in previous:
                assert pods is previous[node], f"{node}: its pods did not change, its list must be the same"
        previous = grouped


def test_a_list_read_in_between_is_not_taken_for_the_copy() -> None:
    """A pass that LISTed (fresh) groups that list whole; the next read of the copy cannot be an
    update of it, since what changed is counted from the copy's last read."""
    copy, groups = informer(), PodsByNode()
    for i in range(12):  # enough that one change is updated, not grouped whole
        copy.apply({"type": "ADDED", "object": pod(f"driver-{i}", f"gpu-{i}", 2 + i)})
    read = copy.read()
    assert read is not None
    groups.group(read[0], read[1], True)
    listed = {"gpu-operator/other": Entry(None, pod_view(pod("other", "gpu-99", 30)), 30)}
    assert set(groups.group(listed, None, False)) == {"gpu-99"}
    copy.apply({"type": "ADDED", "object": pod("driver-new", "gpu-0", 40)})
    read = copy.read()
    assert read is not None and read[1] == {"gpu-operator/driver-new"}
    assert {n: [p.key for p in ps] for n, ps in groups.group(read[0], read[1], True).items()} == whole(read[0])
