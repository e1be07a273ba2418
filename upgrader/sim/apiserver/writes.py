"""What the server does to a written body before storing it: its own metadata, status, generation.

Pure functions over dicts; the store supplies uids, clocks and the lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.registry import ResourceType

Obj = dict[str, Any]

# Metadata only the server sets: an update keeps the stored values whatever the body says.
SERVER_METADATA = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
)
# Metadata a create body may carry but the new object must not.
TRANSIENT_METADATA = ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds")
# Kinds that count generations even when created without a spec.
GENERATION_KINDS = ("DaemonSet", "Deployment", "Job")


def meta(obj: Obj) -> Obj:
    m: Obj = obj.setdefault("metadata", {})
    return m


def place(rtype: ResourceType, namespace: str | None, m: Obj, namespace_exists: Callable[[str], bool]) -> None:
    """Give a new object the request's namespace (or none, for a cluster-scoped type)."""
    if not rtype.namespaced:
        m.pop("namespace", None)
        return
    ns = namespace or m.get("namespace") or "default"
    if m.get("namespace") not in (None, "", ns):
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if rtype.plural != "namespaces" and not namespace_exists(ns):
        raise errors.not_found("namespaces", "", ns)
    m["namespace"] = ns


def check_resource_version(rtype: ResourceType, name: str, current: Obj, wanted: str | None) -> None:
    """A resourceVersion a write names must still be the stored one: otherwise 409 Conflict."""
    if wanted and wanted != current["metadata"]["resourceVersion"]:
        raise errors.conflict(rtype.plural, rtype.group, name)


def stamp_created(rtype: ResourceType, obj: Obj, uid: str, created: str) -> None:
    """Fill a new object's type, uid and creation time; drop what only a stored object has."""
    m = meta(obj)
    obj["apiVersion"] = rtype.api_version
    obj["kind"] = rtype.kind
    m["uid"] = uid
    m["creationTimestamp"] = created
    for transient in TRANSIENT_METADATA:
        m.pop(transient, None)
    if "spec" in obj or rtype.kind in GENERATION_KINDS or rtype.custom:
        m["generation"] = 1


def written_over(rtype: ResourceType, current: Obj, new: Obj, subresource: str | None) -> Obj:
    """The object an update of `current` with `new` stores.

    Server metadata stays; a `status` write changes only status, a main-resource write of a type
    with a status subresource leaves status alone ("internal" behaviour writes change both); a
    spec change bumps the generation.
    """
    # Its own metadata dict: a merge patch that leaves metadata alone shares the stored one, which
    # the resourceVersion and generation set below must not change in place.
    m, cur_meta = dict(meta(new)), current["metadata"]
    new["metadata"] = m
    for fixed in SERVER_METADATA:
        if fixed in cur_meta:
            m[fixed] = cur_meta[fixed]
        else:
            m.pop(fixed, None)
    new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
    if subresource == "status":
        new = {**current, "status": new.get("status", {})}
        new["metadata"] = dict(cur_meta)
    elif subresource is None and "status" in rtype.subresources:
        if "status" in current:
            new["status"] = current["status"]
        else:
            new.pop("status", None)
    if "generation" in cur_meta:
        changed = _generational(rtype, new) != _generational(rtype, current)
        new["metadata"]["generation"] = cur_meta["generation"] + (1 if changed else 0)
    return new


def _generational(rtype: ResourceType, obj: Obj) -> Any:
    """What a change of bumps `metadata.generation`: the spec; for a custom resource everything but
    metadata and status, as kube-apiserver counts it for CRs."""
    if not rtype.custom:
        return obj.get("spec")
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}
