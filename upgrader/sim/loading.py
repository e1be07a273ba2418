"""Loading many objects at once (generated fleets, dumps) without one reaction per object.

`EmulatedCluster.create` runs every behaviour on every write, which is what tests want and what
150,000 pods cannot afford: each pod change recomputes the status of its namespace's PDBs from all
the namespace's pods (quadratic in a namespace), and each DaemonSet pod its DaemonSet's status.
`load` stores the objects inside `Store.bulk()` (no reactors run; watchers still see every ADDED)
and then settles the behaviours once: every DaemonSet synced (its revision, a pod for each node it
wants, its status), every loaded Job given its pods, every PodDisruptionBudget's status computed.
The result is what loading the same objects one by one gives (`bulk=False`, and
tests/sim/test_bulk_load.py compares the two).

Objects are restored, not created: a uid and creationTimestamp they carry stay, so owner references
between them hold, and the dicts are stored as given (hand over fresh ones). Namespaces they name
are created when missing. Objects load in dependency order: namespaces and CRDs, nodes, revisions,
everything else, pods, then the controllers of pods (DaemonSets, Jobs) and the budgets over them.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from typing import Any

from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.events_v1 import stored_form
from upgrader.sim.apiserver.registry import ResourceType
from upgrader.sim.parts import ClusterParts

Obj = dict[str, Any]
FIRST = ("Namespace", "CustomResourceDefinition", "Node", "ControllerRevision")
LAST = ("Pod", "DaemonSet", "Job", "PodDisruptionBudget")


def _rank(obj: Obj) -> int:
    kind = obj.get("kind")
    if kind in FIRST:
        return FIRST.index(kind)
    if kind in LAST:
        return len(FIRST) + 1 + LAST.index(kind)
    return len(FIRST)


def load(cluster: ClusterParts, objects: Iterable[Obj], bulk: bool = True) -> int:
    """Store `objects` (each with apiVersion and kind) and settle the cluster; returns how many."""
    store = cluster.store
    namespaces = store.type("", "v1", "namespaces")
    types: dict[tuple[str, str], ResourceType] = {}
    jobs: list[Obj] = []
    count = 0
    with store.lock:
        with store.bulk() if bulk else nullcontext():
            for obj in sorted(objects, key=_rank):
                wanted = (str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
                rtype = types.get(wanted) or store.registry.by_kind(*wanted)
                if rtype is None:
                    raise errors.bad_request(f"no resource type for {wanted[0]} {wanted[1]}")
                types[wanted] = rtype
                rtype, obj = stored_form(store, rtype, obj)  # an events.k8s.io/v1 Event is a core Event
                namespace = None
                if rtype.namespaced:
                    namespace = (obj.get("metadata") or {}).get("namespace") or "default"
                    if store.find(namespaces, "", namespace) is None:
                        store.restore(namespaces, "", {"metadata": {"name": namespace}})
                stored = store.restore(rtype, namespace, obj)
                count += 1
                if bulk and rtype.kind == "CustomResourceDefinition":
                    _register(cluster, stored)  # objects of its kind may follow in this load
                elif bulk and rtype.kind == "Job":
                    jobs.append(stored)
        if bulk:
            settle(cluster, jobs)
    return count


def _register(cluster: ClusterParts, crd: Obj) -> None:
    cluster.store.registry.serve_crd(crd)


def settle(cluster: ClusterParts, new_jobs: Iterable[Obj] = ()) -> None:
    """Bring every behaviour's state up to date with the store, as its reactions would have."""
    store, daemonsets = cluster.store, cluster.daemonsets
    with store.lock:
        for ds in store.objects(daemonsets.ds):
            daemonsets.sync_daemonset(ds)
        for job in new_jobs:
            current = store.find(cluster.jobs.jobs, job["metadata"]["namespace"], job["metadata"]["name"])
            if current is not None:
                cluster.jobs.ensure_pods(current)
        with store.bulk():  # a status write's only reaction is recomputing that same status
            cluster.disruption.refresh_all()
