"""Observe: a constant number of LIST calls (fewer with the watch-fed cache), plus one pod LIST per
node being worked on."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from upgrader.core.fleet.interlocks import CLUSTER_POLICY, NVIDIA_DRIVER, OperatorUpgrade, judge, operator_upgrade
from upgrader.core.model.gpupods import GpuClaims, claim_index
from upgrader.core.model.selectors import parse_label_selector
from upgrader.core.model.views import (
    Control,
    DriverSet,
    Interlock,
    NodeView,
    PodView,
    Snapshot,
    driver_set,
    node_view,
    pdb_view,
    pod_view,
)
from upgrader.core.node.steps import NEEDS_PODS
from upgrader.core.report.document import read_status
from upgrader.inputs import collector_paused
from upgrader.kube.addresses import Addresses
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.cache import ClusterCache, node_metadata, watch_paths
from upgrader.kube.informer import Entry, Informer, object_key, version_of
from upgrader.kube.pod_groups import PodsByNode
from upgrader.kube.room_copy import fleet_gpu_pods

Obj = dict[str, Any]
V = TypeVar("V")


def status_path(settings: Addresses) -> str:
    return f"/api/v1/namespaces/{settings.namespace}/configmaps/{settings.status_configmap}"


def control_path(settings: Addresses) -> str:
    return f"/api/v1/namespaces/{settings.namespace}/configmaps/{settings.control_configmap}"


ACKNOWLEDGED_KEY = "acknowledged"  # JSON: node -> its gpu-upgrader.io/failed-at when acknowledged
PROMOTED_KEY = "promoted"  # JSON: stage -> its finish when promoted (core/rollout/stages.py)


def read_control(api: KubeApi, settings: Addresses) -> Control:
    """The operators' intent from the control ConfigMap, and the last status from the status one.

    The controller never writes intent. A pause an older `upgrader pause` left in the status ConfigMap
    (`paused: "true"`) is still honoured, until `upgrader resume`. When the control ConfigMap is gone
    but the last status says the rollout was paused, the pause stays in force, and the status says why.
    """
    status_data = ((api.get(status_path(settings)) or {}).get("data")) or {}
    try:
        previous = read_status(json.loads(status_data.get("status.json") or "{}"))
    except ValueError:
        previous = None
    control = api.get(control_path(settings))
    data = (control or {}).get("data") or {}
    legacy = status_data.get("paused") == "true"
    kept = None
    if control is None and previous is not None and previous.paused and not legacy:
        kept = (
            f"configmap {settings.namespace}/{settings.control_configmap} is gone, and the last status recorded a "
            "pause: it stays in force"
        )
    return Control(
        paused=data.get("paused") == "true" or legacy or kept is not None,
        acknowledged=parse_acknowledged(data.get(ACKNOWLEDGED_KEY)),
        promoted=parse_acknowledged(data.get(PROMOTED_KEY)),
        previous=previous,
        kept=kept,
    )


def parse_acknowledged(text: str | None) -> dict[str, str]:
    """`{"<node>": "<failed-at>"}` (or `{"<stage>": "<finished-at>"}` for promotions); anything else
    acknowledges or promotes nothing (fail closed)."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def take(
    api: KubeApi,
    settings: Addresses,
    cache: ClusterCache | None = None,
    fresh: bool = False,
    room: bool = False,
    control: Control | None = None,
) -> tuple[Snapshot, dict[str, Obj]]:
    """The snapshot, and the raw node objects (the adapter builds guarded patches from them).

    With a synced `cache`, nodes, driver pods and budgets come from it instead of a LIST; `fresh` LISTs them
    anyway (and hands the lists to the cache), as the first pass after winning the lease does.
    `room` (gpuCapacity.onInsufficient: wait): the snapshot can read every node's pods too, in one LIST,
    when the pass first judges a start against the room its evicted GPU pods would find
    (`Snapshot.fleet_pods`): a pass that starts nothing (paused, halted, outside a window, no free
    slot) never reads them. `control`: the operators' intent when it comes from elsewhere than the
    control ConfigMap (the rollout object), which is then not read.
    """
    with collector_paused():
        return _take(api, settings, cache, fresh, room, control)


def _take(
    api: KubeApi,
    settings: Addresses,
    cache: ClusterCache | None,
    fresh: bool,
    room: bool = False,
    control: Control | None = None,
) -> tuple[Snapshot, dict[str, Obj]]:
    ns = settings.driver_namespace
    (nodes_path, _), (pods_path, pods_selector), (budgets_path, _) = watch_paths(settings)
    node_entries, _ = _read(api, nodes_path, None, node_view, cache.nodes if cache else None, fresh, node_metadata)
    raw_nodes = {name: e.raw for name, e in node_entries.items() if e.raw is not None}
    nodes = {name: e.view for name, e in node_entries.items()}
    daemonsets = api.list(
        f"/apis/apps/v1/namespaces/{ns}/daemonsets", label_selector=settings.driver_daemonset_selector
    ).get("items", [])
    revisions = api.list(f"/apis/apps/v1/namespaces/{ns}/controllerrevisions").get("items", []) if daemonsets else []
    pod_entries, changed = _read(api, pods_path, pods_selector, pod_view, cache.driver_pods if cache else None, fresh)
    budget_entries, _ = _read(api, budgets_path, None, pdb_view, cache.pdbs if cache else None, fresh)
    pdbs = [e.view for e in budget_entries.values() if e.view is not None]
    control = control if control is not None else read_control(api, settings)
    driver_pods = (
        cache.driver_pods_by_node.group(pod_entries, changed, changed is not _LISTED)
        if cache is not None
        else PodsByNode().group(pod_entries, None, False)
    )
    node_pods: dict[str, list[PodView]] = {}
    is_driver = parse_label_selector(pods_selector or "")
    missing: dict[str, int | None] = {}  # driver pods the copy holds that a node's list lacked -> its version
    oldest: int | None = None
    for name, node in nodes.items():
        if node.state in NEEDS_PODS:
            listing = api.list("/api/v1/pods", field_selector=f"spec.nodeName={name}")
            node_pods[name] = [pod_view(p) for p in listing.get("items", [])]
            # A node being worked on reads its driver pods from this fresh list, not from the copy,
            # which an API server restored from an older state may never correct.
            held = {p.key for p in driver_pods.get(name, [])}
            driver_pods[name] = [p for p in node_pods[name] if p.namespace == ns and is_driver.matches(p.labels)]
            listed_at = version_of(listing)
            missing.update((key, listed_at) for key in held - {p.key for p in driver_pods[name]})
            oldest = min(filter(None, (oldest, listed_at)), default=None)
    if cache is not None:
        check_copy(cache, missing, oldest)
    sets = [driver_set(d, revisions) for d in daemonsets]
    snapshot = Snapshot(
        nodes=nodes,
        driver_pods=driver_pods,
        node_pods=node_pods,
        pdbs=pdbs,
        driver_sets=sets,
        control=control,
        gpu_claims=read_gpu_claims(api, [p for pods in node_pods.values() for p in pods]),
        interlocks=read_interlocks(api, sets),
        fleet_pods=(lambda: fleet_pods(api, cache, nodes, node_pods)) if room else None,
        candidate_pods=candidate_pods(api, node_pods),
    )
    return snapshot, raw_nodes


def candidate_pods(api: KubeApi, node_pods: dict[str, list[PodView]]) -> Callable[[str], list[PodView]]:
    """`Snapshot.candidate_pods`: a node's pods, those the pass read already, else one LIST by node
    name, kept for the pass (a pass reads only the candidates it judges: core/fleet/pdb_choice.py)."""
    more: dict[str, list[PodView]] = {}

    def pods_of(name: str) -> list[PodView]:
        if name in node_pods:
            return node_pods[name]
        if name not in more:
            items = api.list("/api/v1/pods", field_selector=f"spec.nodeName={name}").get("items", [])
            more[name] = [pod_view(p) for p in items]
        return more[name]

    return pods_of


def fleet_pods(
    api: KubeApi, cache: ClusterCache | None, nodes: dict[str, NodeView], listed: dict[str, list[PodView]]
) -> tuple[dict[str, list[PodView]], GpuClaims]:
    """`Snapshot.fleet_pods`: the GPU pods on the other nodes from the watch-fed copy while it is
    synced (kube/room_copy.py), else every pod in one LIST; and the GPU claims they hold."""
    copy = cache.gpu_pods if cache is not None else None
    copied = fleet_gpu_pods(copy, cache.gpu_pods_by_node, nodes, listed) if cache and copy else None
    if copied is None:
        return read_fleet_pods(api, nodes, listed)
    by_node, claiming = copied
    return by_node, read_gpu_claims(api, claiming)


def read_fleet_pods(
    api: KubeApi, nodes: dict[str, NodeView], listed: dict[str, list[PodView]]
) -> tuple[dict[str, list[PodView]], GpuClaims]:
    """Every pod on the other nodes, in one LIST, and the GPU claims they hold (`Snapshot.fleet_pods`)."""
    everyone: dict[str, list[PodView]] = {}
    for pod in api.list("/api/v1/pods").get("items", []):
        view = pod_view(pod)
        if view.node in nodes and view.node not in listed:
            everyone.setdefault(view.node, []).append(view)
    return everyone, read_gpu_claims(api, [p for pods in everyone.values() for p in pods])


OPERATOR_PATHS = {
    CLUSTER_POLICY: "/apis/nvidia.com/v1/clusterpolicies",
    NVIDIA_DRIVER: "/apis/nvidia.com/v1alpha1/nvidiadrivers",
}


def read_interlocks(api: KubeApi, driver_sets: list[DriverSet]) -> tuple[Interlock, ...]:
    """What stands between upgrader and the drivers (core/fleet/interlocks.py): the ClusterPolicy or
    NVIDIADriver that owns each driver DaemonSet (one GET each; every ClusterPolicy, one LIST, for a
    DaemonSet no such object owns). One that is not there (404, or a CRD not served) holds nothing; one
    we may not read (403) means we cannot judge, and upgrader acts on no node."""
    owners = {ds.owner for ds in driver_sets if ds.owner is not None and ds.owner[0] in OPERATOR_PATHS}
    reads = [(kind, f"{OPERATOR_PATHS[kind]}/{name}", api.get) for kind, name in sorted(owners)]
    if any(ds.owner is None or ds.owner[0] not in OPERATOR_PATHS for ds in driver_sets):
        reads.append((CLUSTER_POLICY, OPERATOR_PATHS[CLUSTER_POLICY], api.list))  # unowned: any may govern it
    upgrades: list[OperatorUpgrade] = []
    unreadable: str | None = None
    for kind, path, read in reads:
        try:
            found = read(path)
        except ApiError as exc:
            if exc.status == 404:
                continue
            if exc.status != 403:
                raise
            unreadable = f"cannot read {path}: {exc.summary}"
            continue
        items = (found or {}).get("items", [found] if found else [])
        upgrades.extend(operator_upgrade(kind, item) for item in items if isinstance(item, dict))
    return judge(upgrades, driver_sets, unreadable)


def check_copy(cache: ClusterCache, missing: dict[str, int | None], listed_at: int | None) -> None:
    """Compare the copy with the nodes' pods as the API server lists them now: a list older than the
    copy, or a driver pod the copy keeps holding after its watch followed the history past a list
    that did not have it, means the server went back in time; both informers list again."""
    gone = cache.contradicted(missing)
    if cache.driver_pods.went_back(listed_at) or cache.nodes.went_back(listed_at):
        why = f"the API server answered at resourceVersion {listed_at}, below the copy's"
    elif gone:
        why = f"driver pod {gone[0]} is in the copy but not on the server, and no watch said it went"
    else:
        return
    for informer in (cache.nodes, cache.driver_pods):
        informer.distrust(why)


CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"


def read_gpu_claims(api: KubeApi, pods: list[PodView]) -> GpuClaims:
    """Which ResourceClaims of `pods` NVIDIA's DRA driver allocated: one LIST, only when a pod holds
    a claim. None when they cannot be read (no resource.k8s.io/v1 on the server, or no permission):
    every claim then counts as a GPU claim, as in the GPU Operator."""
    if not any(p.claims for p in pods):
        return {}
    try:
        return claim_index(api.list(CLAIMS_PATH).get("items", []))
    except ApiError as exc:
        if exc.status in (403, 404):
            return None
        raise


_LISTED: set[str] = set()  # _read's "changed" for a collection it LISTed: not the copy's


def _read(
    api: KubeApi,
    path: str,
    selector: str | None,
    view: Callable[[Obj], V],
    informer: Informer[V] | None,
    fresh: bool,
    keep: Callable[[Obj], Obj | None] = lambda obj: None,
) -> tuple[dict[str, Entry[V]], set[str] | None]:
    """A collection keyed as the cache keys it: the cache's copy while it is synced (and `fresh` is
    not asked for), with the keys changed since it was last read (`Informer.read`), else a LIST,
    which the cache is handed too (and `_LISTED` for what changed). Of a listed object only what
    `keep` returns is held (a pass needs a node's metadata to patch it, nothing of a pod's or a
    budget's JSON): the rest of the list is freed before the next collection is decoded."""
    held = informer.read() if informer is not None and not fresh else None
    if held is not None:
        return held
    listing = api.list(path, label_selector=selector)
    entries = {object_key(o): Entry(keep(o), view(o), version_of(o)) for o in listing.get("items", [])}
    if informer is not None:
        informer.absorb(listing, {key: e.view for key, e in entries.items()})
    return entries, _LISTED
