"""Refuse a plan whose input cannot tell what it must: when the tool cannot judge, it says so and refuses.

A kubectl List carries only items, so "no PodDisruptionBudget in the cluster" and "pdb left out of the
`kubectl get`" look the same. The rule: a file must hold the kinds every GPU cluster has, Nodes, Pods
(the driver pods at least), DaemonSets (the driver's) and ControllerRevisions (the DaemonSet controller
writes one for every DaemonSet); and NVIDIADrivers where a driver DaemonSet belongs to one. A file without
PodDisruptionBudgets may be a cluster without any: the plan goes on and a note on stderr says what it
took for granted. Jobs are never read (waitForCompletion matches pods), nor required.

A live plan lists each kind; a list that fails stops it (exit 1), one that succeeds is the truth, empty
or not. For both, every driver DaemonSet needs its newest ControllerRevision, and every GPU node a driver
DaemonSet (unless `nvidia.com/gpu.deploy.driver` says its driver is not the Operator's to install): a
node nothing selects would otherwise be left out of the plan in silence.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Sequence, Set
from typing import Any

from upgrader.controller.settings import Settings
from upgrader.core.fleet.managed import fleet
from upgrader.core.fleet.nvidia_drivers import gpu_nodes
from upgrader.core.model.views import Snapshot
from upgrader.inputs import ConfigError

Obj = dict[str, Any]
EXPORT = "kubectl get nodes,pods,pdb,daemonsets,controllerrevisions,jobs -A -o json"
EXPORT_WITH_NVIDIADRIVERS = "kubectl get nodes,pods,pdb,daemonsets,controllerrevisions,jobs,nvidiadrivers -A -o json"
# Kinds a file must hold: as said in a message, and what upgrader cannot do without them.
REQUIRED = {
    "Pod": ("Pods", "see the driver pods and the GPU pods an upgrade evicts"),
    "DaemonSet": ("DaemonSets", "tell which driver a node should run"),
    "ControllerRevision": ("ControllerRevisions", "tell a node's driver revision from the newest"),
}
DEPLOY_DRIVER = "nvidia.com/gpu.deploy.driver"  # the Operator's: `pre-installed`, or `false` to keep it off
SHOWN = 3  # nodes named in a message; the rest are counted


def check_file(name: str, kinds: Set[str], pods: Sequence[Obj]) -> None:
    """A kubectl List holds every kind a plan needs, of all namespaces; ConfigError naming what is missing."""
    missing = [REQUIRED[kind] for kind in REQUIRED if kind not in kinds]
    if missing:
        raise ConfigError(
            f"--from-file {name}: no {_either([m[0] for m in missing])} in it: without them upgrader cannot "
            f"{_either([m[1] for m in missing])}; export with {EXPORT}"
        )
    namespace = _only_namespace(pods)
    if namespace is not None:  # kube-system alone runs pods in every cluster: this is `kubectl get -n`
        raise ConfigError(
            f"--from-file {name}: every Pod in it is in namespace {namespace or '(none)'}: an export of one "
            f"namespace leaves out the GPU workloads and their PodDisruptionBudgets; export with {EXPORT}"
        )


def _only_namespace(pods: Sequence[Obj]) -> str | None:
    """The one namespace every pod is in; None when there are none or several (found at the second)."""
    first = None
    for pod in pods:
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        if first is None:
            first = namespace
        elif namespace != first:
            return None
    return first


def file_notes(name: str, kinds: Set[str], daemonsets: Sequence[Obj] = ()) -> list[str]:
    """What a file left open that a cluster may well have none of, and what the plan took for granted."""
    notes = []
    if "PodDisruptionBudget" not in kinds:
        notes.append(
            f"--from-file {name} has no PodDisruptionBudgets: the plan takes it the cluster has none; if the kubectl "
            "get left out pdb, evictions a budget would refuse are not shown"
        )
    owned = any(
        isinstance(r, dict) and r.get("kind") == "ClusterPolicy"
        for ds in daemonsets
        for r in (ds.get("metadata") or {}).get("ownerReferences") or ()
    )
    if owned and "ClusterPolicy" not in kinds:  # its DaemonSets say there is one: the export left it out
        notes.append(
            f"--from-file {name} has no ClusterPolicy, though a ClusterPolicy owns its driver DaemonSets: whether "
            "the GPU Operator's own upgrade controller is on (autoUpgrade) is not checked; add clusterpolicies to "
            "the kubectl get"
        )
    return notes


def say_notes(notes: Sequence[str]) -> None:
    for note in notes:
        print(f"upgrader: note: {note}", file=sys.stderr)


def check_coverage(
    file: str | None, kinds: Set[str], driver_ds: Sequence[Obj], snapshot: Snapshot, settings: Settings
) -> None:
    """Driver DaemonSets, their revisions and NVIDIADrivers cover every GPU node; ConfigError naming the gap."""
    where = f"--from-file {file}: " if file else ""
    if not driver_ds:
        raise ConfigError(where + _no_driver_daemonset(file, settings))
    for ds in snapshot.driver_sets:
        if ds.newest_hash is None:
            raise ConfigError(where + _no_revision(file, f"{ds.namespace}/{ds.name}"))
    owned = _nvidiadriver_owned(driver_ds)
    if owned is not None and "NVIDIADriver" not in kinds:
        raise ConfigError(where + _no_nvidiadrivers(file, *owned))
    left_out = _uncovered(snapshot)
    if left_out:
        raise ConfigError(where + _uncovered_nodes(file, left_out, settings))


def _no_driver_daemonset(file: str | None, settings: Settings) -> str:
    labelled = f"none labelled {settings.driver_daemonset_selector}"
    if file:
        return (
            f"no driver DaemonSet in it ({labelled}): without one upgrader cannot tell which driver a node "
            f"should run; export with {EXPORT}, or set UPGRADER_DRIVER_DAEMONSET_SELECTOR to their labels"
        )
    return (
        f"the cluster has no driver DaemonSet in namespace {settings.driver_namespace} ({labelled}): there is no "
        "driver to upgrade; UPGRADER_DRIVER_NAMESPACE and UPGRADER_DRIVER_DAEMONSET_SELECTOR say where to look"
    )


def _no_revision(file: str | None, ds: str) -> str:
    if file:
        return (
            f"no ControllerRevision of driver DaemonSet {ds} in it: without it upgrader cannot tell a node's "
            f"driver revision from the newest; export with {EXPORT}"
        )
    return (
        f"driver DaemonSet {ds} has no ControllerRevision yet (the DaemonSet controller writes one for each): "
        "upgrader cannot tell a node's driver revision from the newest; plan again once it has one"
    )


def _nvidiadriver_owned(driver_ds: Sequence[Obj]) -> tuple[str, str] | None:
    """The first driver DaemonSet an NVIDIADriver owns, and that NVIDIADriver: the cluster uses the CRD."""
    for ds in driver_ds:
        meta = ds.get("metadata") or {}
        for ref in meta.get("ownerReferences") or ():
            if isinstance(ref, dict) and ref.get("kind") == "NVIDIADriver":
                return f"{meta.get('namespace') or ''}/{meta.get('name')}", str(ref.get("name"))
    return None


def _no_nvidiadrivers(file: str | None, ds: str, owner: str) -> str:
    why = f"yet driver DaemonSet {ds} belongs to NVIDIADriver {owner}: without them upgrader cannot check"
    if file:
        return f"no NVIDIADrivers in it, {why} that no two select one node; export with {EXPORT_WITH_NVIDIADRIVERS}"
    return f"the cluster serves no nvidiadrivers (nvidia.com/v1alpha1), {why} that no two select one node"


def _uncovered(snapshot: Snapshot) -> list[str]:
    """GPU nodes no driver DaemonSet selects (nor runs a driver pod on), whose driver is the Operator's."""
    split = fleet(snapshot)
    known = {n.name for n in split.managed} | set(split.skipped) | {name for name, _ in split.invalid}
    return sorted(
        n.name
        for n in gpu_nodes(snapshot.nodes.values())
        if n.name not in known and n.labels.get(DEPLOY_DRIVER, "true") == "true"
    )


def _uncovered_nodes(file: str | None, names: Sequence[str], settings: Settings) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    one = len(names) == 1
    nodes = f"GPU node {names[0]} is" if one else f"GPU nodes {', '.join(names[:SHOWN])}{more} are"
    them, their = ("it", "its") if one else ("them", "their")
    preinstalled = f"a node whose driver is not the GPU Operator's carries {DEPLOY_DRIVER}=false or pre-installed"
    if file:
        return (
            f"{nodes} selected by no driver DaemonSet in it: the plan would leave {them} out; export the driver "
            f"DaemonSets that install {their} driver ({EXPORT}); {preinstalled}"
        )
    return (
        f"{nodes} selected by no driver DaemonSet in namespace {settings.driver_namespace} (labelled "
        f"{settings.driver_daemonset_selector}): the plan would leave {them} out; {preinstalled}"
    )


def _either(words: Collection[str]) -> str:
    """`a`, `a or b`, `a, b or c`."""
    items = list(words)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"
