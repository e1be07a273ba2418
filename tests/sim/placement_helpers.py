"""Shared by the workload placement tests: a virtual cluster with the `ml` namespace (it replaces
the conftest `cluster`), nodes and ReplicaSet pods to place, and readers of where a recreated pod
went or why it could not go."""

from __future__ import annotations

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
