"""The rules of DELETE: preconditions, a pod's grace period, cascading by owner, and the answer."""

from __future__ import annotations

from typing import Any, Protocol

from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.clock import parse_rfc3339
from upgrader.sim.apiserver.registry import Registry, ResourceType

Obj = dict[str, Any]

# Resources whose DELETE answers with the object (ReturnDeletedObject); the rest answer a Status.
RETURN_DELETED_OBJECT = frozenset({"pods", "serviceaccounts", "services"})


def check_preconditions(rtype: ResourceType, name: str, current: Obj, preconditions: Obj | None) -> None:
    """A uid or resourceVersion precondition that the stored object does not meet is a 409."""
    cur_meta = current["metadata"]
    for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
        want = (preconditions or {}).get(field)
        if want and want != cur_meta.get(field):
            raise errors.precondition_failed(
                rtype.plural,
                rtype.group,
                name,
                f"{label} in precondition: {want}, {label} in object meta: {cur_meta.get(field)}",
            )


def pod_grace(pod: Obj, requested: int | None) -> int:
    """How long a deleted pod terminates: immediate when unscheduled or already finished."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return 0
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    if requested is not None and requested >= 0:
        return requested
    return int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))


def termination_start(pod: Obj, grace: int, now: float) -> float | None:
    """When a pod's grace period counts from; None if it already terminates at least as fast.

    Only a shorter grace period may be given to a terminating pod, and it counts from the first
    deletion request.
    """
    m = pod["metadata"]
    if not m.get("deletionTimestamp"):
        return now
    old_grace = int(m.get("deletionGracePeriodSeconds", grace))
    if old_grace <= grace:
        return None
    return parse_rfc3339(m["deletionTimestamp"]) - old_grace


def owned_by(obj: Obj, owner_uid: str) -> bool:
    """Whether an ownerReference names the owner (so background cascading deletion takes it)."""
    refs = obj["metadata"].get("ownerReferences") or []
    return any(r.get("uid") == owner_uid for r in refs)


class _Objects(Protocol):
    """What cascading deletion uses of the store: store.py passes itself."""

    registry: Registry

    def objects(self, rtype: ResourceType, namespace: str | None = None) -> list[Obj]: ...
    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None: ...
    def delete(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj: ...


def collect_dependents(store: _Objects, owner_uid: str) -> None:
    """Background cascading deletion: objects whose ownerReferences name the deleted owner."""
    for rtype in list(store.registry.types.values()):
        for obj in store.objects(rtype):
            if owned_by(obj, owner_uid):
                m = obj["metadata"]
                if store.find(rtype, m.get("namespace"), m["name"]) is obj:
                    store.delete(rtype, m.get("namespace"), m["name"])


def deletion_answer(rtype: ResourceType, deleted: Obj) -> Obj:
    """What a DELETE answers: the object for a few resources, a Status naming it for the rest."""
    if rtype.plural in RETURN_DELETED_OBJECT:
        return deleted
    m = deleted["metadata"]
    details: Obj = {"name": m["name"], "kind": rtype.plural, "uid": m.get("uid", "")}  # kind is the plural
    if rtype.group:
        details["group"] = rtype.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
