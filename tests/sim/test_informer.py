"""The watch-fed cache (upgrader/kube/informer.py) against the emulator, driven step by step in process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from upgrader.controller.settings import Settings
from upgrader.core.model.states import STATE_LABEL
from upgrader.core.model.views import NodeView, node_view, pod_view
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.cache import ClusterCache
from upgrader.kube.informer import Informer
from upgrader.kube.room_copy import gpu_pods_copy
from upgrader.kube.snapshot import fleet_pods, read_fleet_pods, take
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import add_dra_pod
from upgrader.sim.fleets.scenarios import build

Obj = dict[str, Any]
BUDGETS = "/apis/policy/v1/poddisruptionbudgets"


@pytest.fixture
def cluster() -> EmulatedCluster:
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy")
    return cluster


def api_for(cluster: EmulatedCluster) -> KubeApi:
    return KubeApi(cluster.client(), sleep=lambda _: None)


def relabel(cluster: EmulatedCluster, node: str, value: str) -> Obj:
    patch = {"metadata": {"labels": {STATE_LABEL: value}}}
    return cluster.store.patch(cluster.type("nodes"), None, node, "application/merge-patch+json", patch)


def nodes_informer(cluster: EmulatedCluster, changes: list[str] | None = None) -> Informer[NodeView]:
    sink = changes if changes is not None else []
    return Informer(api_for(cluster), "/api/v1/nodes", node_view, on_change=lambda: sink.append("change"))


def states(informer: Informer[NodeView]) -> dict[str, str | None]:
    entries = informer.entries()
    assert entries is not None
    return {name: e.view.state.value if e.view.state else None for name, e in entries.items()}


def test_not_synced_until_listed_then_follows_changes(cluster: EmulatedCluster) -> None:
    changes: list[str] = []
    informer = nodes_informer(cluster, changes)
    assert informer.entries() is None  # a pass must LIST
    informer.step()
    assert set(states(informer)) == {n["metadata"]["name"] for n in cluster.store.objects(cluster.type("nodes"))}
    relabel(cluster, "gpu-a-01", "upgrade-required")
    assert states(informer)["gpu-a-01"] is None, "nothing read yet"
    changes.clear()
    informer.step()
    assert states(informer)["gpu-a-01"] == "upgrade-required"
    assert changes == ["change"]
    cluster.store.remove(cluster.type("nodes"), cluster.get("nodes", "gpu-c-02"))
    informer.step()
    assert "gpu-c-02" not in states(informer)


def test_our_write_is_seen_at_once_and_an_older_event_does_not_undo_it(cluster: EmulatedCluster) -> None:
    informer = nodes_informer(cluster)
    informer.step()
    first = relabel(cluster, "gpu-a-01", "upgrade-required")  # someone else's change, not followed yet
    ours = relabel(cluster, "gpu-a-01", "cordon-required")  # our write: the response is observed
    informer.observe(ours)
    assert states(informer)["gpu-a-01"] == "cordon-required"
    informer.apply({"type": "MODIFIED", "object": first})  # the lagging watch delivers the older one
    assert states(informer)["gpu-a-01"] == "cordon-required"
    informer.step()
    assert states(informer)["gpu-a-01"] == "cordon-required"


def test_observe_adds_nothing_it_does_not_hold(cluster: EmulatedCluster) -> None:
    informer = Informer(api_for(cluster), "/api/v1/namespaces/gpu-operator/pods", node_view, label_selector="app=none")
    informer.step()
    assert informer.entries() == {}
    pod = cluster.store.objects(cluster.type("pods"), "gpu-operator")[0]
    informer.observe(pod)
    assert informer.entries() == {}


def test_a_newer_list_drops_what_was_deleted_and_keeps_our_later_write(cluster: EmulatedCluster) -> None:
    informer = nodes_informer(cluster)
    informer.step()  # then the watch lags: nothing below reaches the informer by itself
    cluster.store.remove(cluster.type("nodes"), cluster.get("nodes", "gpu-c-02"))
    relabel(cluster, "gpu-b-02", "upgrade-required")  # someone else's change
    listing = api_for(cluster).list("/api/v1/nodes")  # a pass's fresh LIST
    informer.observe(relabel(cluster, "gpu-a-02", "cordon-required"))  # our write, after the list
    informer.absorb(listing)
    held = states(informer)
    assert "gpu-c-02" not in held
    assert held["gpu-b-02"] == "upgrade-required"
    assert held["gpu-a-02"] == "cordon-required", "newer than the list: kept"


def test_a_list_older_than_the_copy_brings_back_nothing_deleted(cluster: EmulatedCluster) -> None:
    informer = nodes_informer(cluster)
    informer.step()
    listing = api_for(cluster).list("/api/v1/nodes")  # a pass's LIST is served...
    cluster.store.remove(cluster.type("nodes"), cluster.get("nodes", "gpu-c-02"))
    informer.step()  # ...the watch applies the DELETED...
    informer.absorb(listing)  # ...and then the pass hands over its list
    informer.step()
    assert "gpu-c-02" not in states(informer)


def test_a_pass_list_older_than_the_informers_own_relist_is_ignored(cluster: EmulatedCluster) -> None:
    informer = nodes_informer(cluster)
    listing = api_for(cluster).list("/api/v1/nodes")  # a pass lists while the informer is unsynced
    cluster.store.remove(cluster.type("nodes"), cluster.get("nodes", "gpu-c-02"))
    informer.step()  # the informer lists (newer) and follows
    informer.absorb(listing)
    informer.step()
    assert "gpu-c-02" not in states(informer)


class ScriptedApi:
    """A list and watch that answer from a script: the second watch reports 410 Gone."""

    def __init__(self, cluster: EmulatedCluster) -> None:
        self.real = api_for(cluster)
        self.lists = 0
        self.watches = 0

    def list(self, path: str, label_selector: str | None = None) -> Obj:
        self.lists += 1
        return self.real.list(path, label_selector)

    def watch(self, path: str, version: str, timeout: int, selector: str | None = None) -> Iterator[Obj]:
        self.watches += 1
        if self.watches == 2:
            yield {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "old"}}
        yield from self.real.watch(path, version, timeout, selector)


def test_410_gone_unsyncs_and_the_next_step_lists_again(cluster: EmulatedCluster) -> None:
    scripted = ScriptedApi(cluster)
    informer: Informer[NodeView] = Informer(scripted, "/api/v1/nodes", node_view)  # type: ignore[arg-type]
    informer.step()
    relabel(cluster, "gpu-b-01", "upgrade-required")
    with pytest.raises(ApiError) as gone:
        informer.step()
    assert gone.value.status == 410
    assert informer.entries() is None, "unsynced: passes LIST until the informer has listed again"
    informer.step()
    assert scripted.lists == 2
    assert states(informer)["gpu-b-01"] == "upgrade-required"


def test_a_bookmark_moves_the_version_without_waking_the_loop(cluster: EmulatedCluster) -> None:
    changes: list[str] = []
    informer = nodes_informer(cluster, changes)
    informer.step()
    changes.clear()
    informer.apply({"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "999999"}}})
    assert changes == []
    assert informer.version == "999999"


def test_a_snapshot_from_the_cache_equals_one_from_lists_with_three_lists_fewer(cluster: EmulatedCluster) -> None:
    settings = Settings(identity="informer-test")
    relabel(cluster, "gpu-a-01", "pod-deletion-required")
    listed, _ = take(api_for(cluster), settings)
    cache = ClusterCache(api_for(cluster), settings, lambda: None)
    cache.nodes.step()
    cache.driver_pods.step()
    cache.pdbs.step()
    before = len(cluster.requests)
    cached, raw = take(api_for(cluster), settings, cache)
    paths = [r.path for r in cluster.requests[before:] if r.verb == "list"]
    assert not {"/api/v1/nodes", "/api/v1/namespaces/gpu-operator/pods", BUDGETS} & set(paths)
    assert cached.pdbs and sorted(cached.pdbs, key=str) == sorted(listed.pdbs, key=str)
    assert "/api/v1/pods" in paths, "the node in progress still gets its pods listed"
    assert cached.nodes == listed.nodes
    assert {n: sorted(p.uid for p in ps) for n, ps in cached.driver_pods.items()} == {
        n: sorted(p.uid for p in ps) for n, ps in listed.driver_pods.items()
    }
    assert set(raw) == set(cached.nodes)


def test_a_budgets_new_status_reaches_the_next_pass_by_the_watch_and_only_its_view_is_built(
    cluster: EmulatedCluster,
) -> None:
    settings = Settings(identity="informer-test")
    cache = ClusterCache(api_for(cluster), settings, lambda: None)
    for informer in (cache.nodes, cache.driver_pods, cache.pdbs):
        informer.step()
    first = {v.key: v for v in take(api_for(cluster), settings, cache)[0].pdbs}
    pdb = cluster.store.objects(cluster.type("poddisruptionbudgets", "policy"))[0]
    key = f"{pdb['metadata']['namespace']}/{pdb['metadata']['name']}"
    assert first[key].disruptions_allowed > 0
    cluster.store.mutate(  # every pod it covers must stay: the emulator's disruption controller says 0
        cluster.type("poddisruptionbudgets", "policy"),
        pdb["metadata"]["namespace"],
        pdb["metadata"]["name"],
        lambda p: p["spec"].update({"maxUnavailable": 0}),
    )
    stale = {v.key: v for v in take(api_for(cluster), settings, cache)[0].pdbs}
    assert stale[key] is first[key], "not seen before the watch brings it"
    cache.pdbs.step()
    before = len(cluster.requests)
    again = {v.key: v for v in take(api_for(cluster), settings, cache)[0].pdbs}
    assert BUDGETS not in [r.path for r in cluster.requests[before:]]
    assert again[key].disruptions_allowed == 0
    assert set(again) == set(first)
    assert all(again[k] is first[k] for k in first if k != key), "the others are the views built before"


class DroppingApi(ScriptedApi):
    """The second watch's stream breaks before it delivers anything (the connection closed)."""

    def __init__(self, cluster: EmulatedCluster) -> None:
        super().__init__(cluster)
        self.versions: list[str] = []

    def watch(self, path: str, version: str, timeout: int, selector: str | None = None) -> Iterator[Obj]:
        self.watches += 1
        self.versions.append(version)
        if self.watches == 2:
            raise ConnectionResetError("the API server closed the connection")
        return self.real.watch(path, version, timeout, selector)


def test_a_dropped_stream_is_resumed_from_the_copys_version_without_listing_again(cluster: EmulatedCluster) -> None:
    dropping = DroppingApi(cluster)
    informer: Informer[NodeView] = Informer(dropping, "/api/v1/nodes", node_view)  # type: ignore[arg-type]
    informer.step()
    held = informer.position()
    relabel(cluster, "gpu-b-01", "upgrade-required")  # while the stream is down
    with pytest.raises(ConnectionResetError):
        informer.step()
    assert informer.entries() is None, "while the watch is down passes LIST"
    kept = informer.entries(resuming=True)  # what the room judgement reads meanwhile (kube/room_copy.py)
    assert kept is not None and kept["gpu-b-01"].view.state is None
    informer.step()  # the watch resumes where the copy was, and brings what it missed
    assert dropping.lists == 1, "not listed again: 15,000 nodes or every GPU pod of the fleet"
    assert dropping.versions[1:] == [str(held), str(held)]
    assert states(informer)["gpu-b-01"] == "upgrade-required"


def test_a_copy_distrusted_while_its_stream_is_down_is_listed_again(cluster: EmulatedCluster) -> None:
    dropping = DroppingApi(cluster)
    informer: Informer[NodeView] = Informer(dropping, "/api/v1/nodes", node_view)  # type: ignore[arg-type]
    informer.step()
    with pytest.raises(ConnectionResetError):
        informer.step()
    informer.distrust("a driver pod the copy holds is not on the server")
    informer.step()
    assert dropping.lists == 2, "a copy the pass found contradicted is replaced by a full list"


class EmptyStreams:
    """A server whose watches end at once with nothing in them (a proxy cutting streams)."""

    def __init__(self) -> None:
        self.watches = 0

    def list(self, path: str, label_selector: str | None = None) -> Obj:
        return {"metadata": {"resourceVersion": "5"}, "items": []}

    def watch(self, path: str, version: str, timeout: int, selector: str | None = None) -> Iterator[Obj]:
        self.watches += 1
        yield from ()


def test_streams_that_end_at_once_are_reopened_at_most_once_a_second() -> None:
    api = EmptyStreams()
    informer: Informer[NodeView] = Informer(api, "/api/v1/nodes", node_view)  # type: ignore[arg-type]
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,), daemon=True)
    thread.start()
    time.sleep(1.5)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert 1 <= api.watches <= 3


def test_the_gpu_pods_copy_lists_in_pages_holds_only_gpu_pods_and_wakes_only_for_them(
    cluster: EmulatedCluster,
) -> None:
    """kube/room_copy.py: every pod LISTed a page at a time, only the pods taking GPUs held (slim),
    and a change to any other pod neither enters the copy nor wakes the loop."""
    wakes: list[str] = []
    copy = gpu_pods_copy(api_for(cluster), lambda: wakes.append("wake"))
    copy.page = 3
    before = len(cluster.requests)
    copy.step()
    pages = [r for r in cluster.requests[before:] if r.verb == "list"]
    pods = cluster.store.objects(cluster.type("pods"))
    assert len(pages) == -(-len(pods) // 3) and all("limit=3" in r.query for r in pages)
    held = copy.entries()
    assert held is not None
    gpu = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods if pod_view(p).gpus > 0}
    assert gpu and set(held) == gpu
    assert all(e.view is not None and not e.view.labels and not e.view.images for e in held.values())
    other = next(p for p in pods if pod_view(p).gpus == 0)
    wakes.clear()
    cluster.store.mutate(
        cluster.type("pods"),
        other["metadata"]["namespace"],
        other["metadata"]["name"],
        lambda p: p["metadata"].setdefault("labels", {}).__setitem__("touched", "yes"),
    )
    copy.step()
    assert wakes == [] and set(copy.entries() or {}) == gpu
    one = next(p for p in pods if pod_view(p).gpus > 0)
    cluster.store.remove(cluster.type("pods"), one)
    copy.step()
    now = {pod_view(p).key for p in cluster.store.objects(cluster.type("pods")) if pod_view(p).gpus > 0}
    assert wakes and set(copy.entries() or {}) == now, "a GPU pod gone (and its controller's new one): woken"
    assert (copy.entries() or {})[pod_view(one).key].version != held[pod_view(one).key].version, "recreated"


def test_the_room_from_the_gpu_pods_copy_is_the_room_from_a_list_of_every_pod(cluster: EmulatedCluster) -> None:
    """snapshot.fleet_pods under wait: the copy's GPU pods by node, and the ResourceClaims they hold
    (read because a pod holds one), are what a LIST of every pod gives."""
    add_dra_pod(cluster, "gpu-a-01")
    api = api_for(cluster)
    cache = ClusterCache(api, Settings(), lambda: None, room=True)
    assert cache.gpu_pods is not None
    cache.gpu_pods.step()
    nodes = {n["metadata"]["name"]: node_view(n) for n in cluster.store.objects(cluster.type("nodes"))}
    listed = {"gpu-b-01": []}  # a node the pass lists afresh: not from the copy
    copied, claims = fleet_pods(api, cache, nodes, listed)
    everyone, listed_claims = read_fleet_pods(api, nodes, listed)
    gpu = {n: sorted(p.key for p in ps if p.gpus > 0 or p.gpu_requests or p.claims) for n, ps in everyone.items()}
    assert {n: sorted(p.key for p in ps) for n, ps in copied.items()} == {n: ks for n, ks in gpu.items() if ks}
    assert claims == listed_claims and claims == {"ml-training/dra-train-gpu": True}
