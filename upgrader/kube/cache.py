"""The controller's watch-fed copy of the cluster: nodes, driver pods and PodDisruptionBudgets (see
informer.py), and under gpuCapacity.onInsufficient: wait the fleet's GPU pods (room_copy.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from upgrader.core.model.views import NodeView, PdbView, PodView, node_view, pdb_view, pod_view
from upgrader.kube.addresses import Addresses
from upgrader.kube.api import KubeApi
from upgrader.kube.informer import Informer, Obj, start
from upgrader.kube.pod_groups import PodsByNode
from upgrader.kube.room_copy import gpu_pods_copy

BUDGETS_PATH = "/apis/policy/v1/poddisruptionbudgets"


def watch_paths(settings: Addresses) -> list[tuple[str, str | None]]:
    """What the controller follows: every node, the driver pods and every PodDisruptionBudget
    (collection path, label selector)."""
    return [
        ("/api/v1/nodes", None),
        (f"/api/v1/namespaces/{settings.driver_namespace}/pods", settings.driver_pod_selector),
        (BUDGETS_PATH, None),
    ]


def node_metadata(node: Obj) -> Obj:
    """What the Applier reads of a raw node (name, uid, resourceVersion, labels, annotations): a
    node's status (conditions, capacity, images, addresses) is most of it, and at 15,000 nodes
    holding it all was 2.5x the memory of the views (bench/README.md)."""
    meta = node.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "uid", "resourceVersion", "labels", "annotations") if k in meta}
    return {"kind": node.get("kind", "Node"), "apiVersion": node.get("apiVersion", "v1"), "metadata": kept}


class ClusterCache:
    def __init__(
        self, api: KubeApi, settings: Addresses, on_change: Callable[[], None], room: bool = False
    ) -> None:
        (nodes_path, _), (pods_path, pods_selector), (budgets_path, _) = watch_paths(settings)
        # Node patches are built against the node's metadata (kube/apply.py), all that is held of
        # it besides its view; for driver pods a pass needs only views.
        self.nodes: Informer[NodeView] = Informer(api, nodes_path, node_view, on_change=on_change, slim=node_metadata)
        self.driver_pods: Informer[PodView] = Informer(
            api, pods_path, pod_view, label_selector=pods_selector, on_change=on_change, keep_raw=False
        )
        # A budget's status moves with every disruption; the watch brings each move as it brings a
        # node's (docs/operations.md#how-a-pass-reads-the-cluster). None: not a budget we can read.
        self.pdbs: Informer[PdbView | None] = Informer(api, budgets_path, pdb_view, on_change=on_change, keep_raw=False)
        # gpuCapacity.onInsufficient: wait: every pod that takes GPUs, slim (kube/room_copy.py).
        self.gpu_pods = gpu_pods_copy(api, on_change) if room else None
        self.gpu_pods_by_node = PodsByNode()
        # The driver pods per node, updated from the pods that changed (kube/pod_groups.py).
        self.driver_pods_by_node = PodsByNode()
        self._suspects: dict[str, int] = {}  # driver pod held in the copy -> a list's version that lacked it

    def contradicted(self, missing: dict[str, int | None]) -> list[str]:
        """Driver pods the copy holds that a list at some resourceVersion did not have, now that the
        copy's watch has followed the history past that version: a watch would have said they went,
        so the history it follows is not the one the server lists from (the server went back in
        time). A copy still behind the list only lags: its pods stay suspects until it catches up."""
        held = self.driver_pods.entries() or {}
        position = self.driver_pods.position()
        found, kept = [], {}
        for key, at in self._suspects.items():
            entry = held.get(key)
            if entry is None or (entry.version or 0) > at:
                continue  # gone from the copy, or a newer write of it: no contradiction
            if position is not None and position >= at:
                found.append(key)
            else:
                kept[key] = at
        for key, listed_at in missing.items():
            if listed_at is not None:
                kept.setdefault(key, listed_at)
        self._suspects = {} if found else kept
        return sorted(found)

    @property
    def synced(self) -> bool:
        """Every copy has listed (and has not lost its watch since)."""
        return all(i.synced for i in self._informers())

    def _informers(self) -> list[Informer[Any]]:
        informers: list[Informer[Any]] = [self.nodes, self.driver_pods, self.pdbs]
        return informers + ([self.gpu_pods] if self.gpu_pods is not None else [])

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        return start(self._informers(), stop)

    def observe(self, obj: Obj) -> None:
        """An object one of our writes got back: a node, or a driver pod we deleted."""
        kind = obj.get("kind")
        if kind == "Node":
            self.nodes.observe(obj)
        elif kind == "Pod":
            self.driver_pods.observe(obj)
