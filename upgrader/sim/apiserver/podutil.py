"""Small facts about pods that several emulator behaviours need."""

from __future__ import annotations

from typing import Any

from upgrader.core.model.gpupods import is_gpu_resource

Obj = dict[str, Any]

CLAIMS = ("resource.k8s.io", "v1", "resourceclaims")


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


def _amounts(container: Obj) -> dict[str, int]:
    resources = container.get("resources") or {}
    out: dict[str, int] = {}
    for name, amount in {**(resources.get("requests") or {}), **(resources.get("limits") or {})}.items():
        if is_gpu_resource(name):
            try:
                out[name] = int(str(amount))
            except ValueError:
                out[name] = 1
    return out


def gpu_requests(pod: Obj) -> dict[str, int]:
    """Per GPU resource (`nvidia.com/gpu*`, `nvidia.com/mig-*`), what the pod holds: its containers'
    sum, or an init container's larger amount."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in _amounts(container).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _amounts(container).items():
            total[name] = max(total.get(name, 0), amount)
    return total


def gpu_request(pod: Obj) -> int:
    """GPUs and MIG slices the pod holds, all resources together."""
    return sum(gpu_requests(pod).values())


def claim_names(pod: Obj) -> list[str]:
    """The ResourceClaims a pod holds (named, or generated from a template once its status says so)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    names = [ref.get("resourceClaimName") or generated.get(ref.get("name")) for ref in spec.get("resourceClaims") or []]
    return [n for n in names if n]


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
    conditions = [c for c in status.get("conditions") or [] if c.get("type") not in ("Ready", "ContainersReady")]
    for ctype in ("ContainersReady", "Ready"):
        cond: Obj = {"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
        if not ready and reason:
            cond["reason"] = reason
        conditions.append(cond)
    status["conditions"] = conditions
    for cs in status.get("containerStatuses") or []:
        cs["ready"] = ready


class PodIndex:
    """Pods by the node they are bound to: behaviours and `kubectl drain` ask this often."""

    def __init__(self) -> None:
        self._by_node: dict[str, dict[tuple[str, str], Obj]] = {}

    def on(self, node: str) -> dict[tuple[str, str], Obj]:
        return self._by_node.get(node, {})

    def update(self, key: tuple[str, str], old: Obj | None, new: Obj | None) -> None:
        if old is not None and node_of(old):
            self._by_node.get(node_of(old), {}).pop(key, None)
        if new is not None and node_of(new):
            self._by_node.setdefault(node_of(new), {})[key] = new

    def rebuild(self, pods: dict[tuple[str, str], Obj]) -> None:
        self._by_node = {}
        for key, pod in pods.items():
            self.update(key, None, pod)
