"""Small facts about pods that several emulator behaviours need."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

GPU_RESOURCE_PREFIX = "nvidia.com/gpu"


def is_ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_terminating(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def node_of(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def gpu_request(pod: Obj) -> int:
    """GPUs (any `nvidia.com/gpu*` resource) the pod's containers request or are limited to."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amounts: dict[str, Any] = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for name, amount in amounts.items():
            if name.startswith(GPU_RESOURCE_PREFIX):
                try:
                    total += int(str(amount))
                except ValueError:
                    total += 1
    return total


def owner(pod: Obj, kind: str | None = None) -> Obj | None:
    """The controlling owner reference (optionally of one kind)."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and (kind is None or ref.get("kind") == kind):
            return dict(ref)
    return None


def set_ready(pod: Obj, ready: bool, now: str, reason: str | None = None) -> None:
    """Set the Ready and ContainersReady conditions and every container's `ready` flag."""
    status = pod.setdefault("status", {})
    value = "True" if ready else "False"
    conditions = [
        c for c in status.get("conditions") or [] if c.get("type") not in ("Ready", "ContainersReady")
    ]
    for ctype in ("ContainersReady", "Ready"):
        cond: Obj = {"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
        if not ready and reason:
            cond["reason"] = reason
        conditions.append(cond)
    status["conditions"] = conditions
    for cs in status.get("containerStatuses") or []:
        cs["ready"] = ready
