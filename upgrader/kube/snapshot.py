"""Observe: a constant number of LIST calls, plus one pod LIST per node being worked on."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from upgrader.config import Settings
from upgrader.core.steps import NEEDS_PODS
from upgrader.core.timefmt import parse_or_none
from upgrader.core.views import Control, Snapshot, driver_set, node_view, pdb_view, pod_view
from upgrader.kube.api import KubeApi

Obj = dict[str, Any]


def status_path(settings: Settings) -> str:
    return f"/api/v1/namespaces/{settings.namespace}/configmaps/{settings.status_configmap}"


def read_control(api: KubeApi, settings: Settings) -> Control:
    cm = api.get(status_path(settings))
    data = (cm or {}).get("data") or {}
    try:
        previous = json.loads(data.get("status.json") or "{}")
    except ValueError:
        previous = {}
    return Control(
        paused=data.get("paused") == "true",
        resumed_at=parse_or_none(data.get("resumedAt")),
        previous=previous,
    )


@contextmanager
def collector_paused() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector while a pass reads and parses the cluster.

    Decoding every node and driver pod allocates millions of dicts, lists and strings, and the
    collector, triggered by allocation counts, would trace the growing heap over and over: about a
    third of a pass's CPU time at 5,000 nodes (bench/README.md). Parsed JSON holds no reference
    cycles, so reference counting frees it all the same; the collector resumes afterwards.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def take(api: KubeApi, settings: Settings) -> tuple[Snapshot, dict[str, Obj]]:
    """The snapshot, and the raw node objects (the adapter builds guarded patches from them)."""
    with collector_paused():
        return _take(api, settings)


def _take(api: KubeApi, settings: Settings) -> tuple[Snapshot, dict[str, Obj]]:
    ns = settings.driver_namespace
    raw_nodes = {n["metadata"]["name"]: n for n in api.list("/api/v1/nodes").get("items", [])}
    daemonsets = api.list(
        f"/apis/apps/v1/namespaces/{ns}/daemonsets", label_selector=settings.driver_daemonset_selector
    ).get("items", [])
    revisions = (
        api.list(f"/apis/apps/v1/namespaces/{ns}/controllerrevisions").get("items", []) if daemonsets else []
    )
    pods = [
        pod_view(p)
        for p in api.list(f"/api/v1/namespaces/{ns}/pods", label_selector=settings.driver_pod_selector).get(
            "items", []
        )
    ]
    pdbs = [
        v
        for p in api.list("/apis/policy/v1/poddisruptionbudgets").get("items", [])
        if (v := pdb_view(p)) is not None
    ]
    control = read_control(api, settings)
    nodes = {name: node_view(obj) for name, obj in raw_nodes.items()}
    driver_pods: dict[str, list] = {}
    for pod in pods:
        driver_pods.setdefault(pod.node, []).append(pod)
    node_pods = {}
    for name, node in nodes.items():
        if node.state in NEEDS_PODS:
            items = api.list("/api/v1/pods", field_selector=f"spec.nodeName={name}").get("items", [])
            node_pods[name] = [pod_view(p) for p in items]
    snapshot = Snapshot(
        nodes=nodes,
        driver_pods=driver_pods,
        node_pods=node_pods,
        pdbs=pdbs,
        driver_sets=[driver_set(d, revisions) for d in daemonsets],
        control=control,
    )
    return snapshot, raw_nodes
