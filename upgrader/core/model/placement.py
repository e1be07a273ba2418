"""Where a pod may be scheduled, as kube-scheduler's filters decide it for GPU capacity: the pod's
nodeSelector, its required node affinity, and the node's NoSchedule/NoExecute taints it tolerates.

Parsed from the API's JSON by `views`; read by `capacity`. Anything unreadable admits nothing: a
pod we cannot place is reported as such, never placed by a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from upgrader.core.model.gpupods import GPU_RESOURCE_PREFIXES, is_gpu_resource
from upgrader.core.model.selectors import Requirement, node_selector_matches

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# nodeSelectorTerm operators as label requirements (selectors.Requirement matches them all).
_NODE_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!", "Gt": ">", "Lt": "<"}
_INTEGER = re.compile(r"-?[0-9]{1,18}")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str
    effect: str  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.operator == "Equal" and self.key == taint.key and self.value == taint.value


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def taints(spec: Mapping[str, Any]) -> tuple[Taint, ...]:
    raw = spec.get("taints")
    return tuple(
        Taint(_text(t.get("key")), _text(t.get("value")), _text(t.get("effect")))
        for t in (raw if isinstance(raw, list) else ())
        if isinstance(t, Mapping)
    )


def tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    raw = spec.get("tolerations")
    return tuple(
        Toleration(
            _text(t.get("key")), _text(t.get("operator")) or "Equal", _text(t.get("value")), _text(t.get("effect"))
        )
        for t in (raw if isinstance(raw, list) else ())
        if isinstance(t, Mapping)
    )


def _count(value: Any, unreadable: int = 0) -> int:
    try:
        return int(str(value))
    except ValueError:
        return unreadable


def gpu_allocatable(status: Mapping[str, Any]) -> dict[str, int]:
    """The node's allocatable GPU and MIG resources (`nvidia.com/gpu`, `nvidia.com/mig-*`)."""
    alloc = status.get("allocatable")
    if not isinstance(alloc, Mapping):
        return {}
    return {str(k): _count(v) for k, v in alloc.items() if is_gpu_resource(str(k))}


def container_gpu_amounts(container: Any, unreadable: int = 0) -> dict[str, int]:
    """Per GPU/MIG resource, what one container asks for: the larger of request and limit (for
    extended resources a limit alone is the request); `unreadable` stands for an amount not an integer."""
    resources = (container.get("resources") if isinstance(container, Mapping) else None) or {}
    amounts: dict[str, int] = {}
    for side in ("requests", "limits"):
        for name, value in (resources.get(side) or {}).items():
            if is_gpu_resource(str(name)):
                amounts[str(name)] = max(amounts.get(str(name), 0), _count(value, unreadable))
    return amounts


def asks_for_gpus(container: Any) -> bool:
    """Whether one container names a GPU or MIG resource in its requests or limits: the cheap test
    that lets most containers of a fleet skip `container_gpu_amounts`. Anything not shaped as the
    API server sends it says True, so that the full reading meets it."""
    if not isinstance(container, dict):
        return True
    resources = container.get("resources")
    if not resources:
        return False
    if not isinstance(resources, dict):
        return True
    for side in ("requests", "limits"):
        amounts = resources.get(side)
        if amounts:
            if not isinstance(amounts, dict):
                return True
            for name in amounts:
                if not isinstance(name, str) or name.startswith(GPU_RESOURCE_PREFIXES):
                    return True
    return False


def gpu_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Per GPU resource, what the pod holds: the containers' sum, or an init container's larger ask."""
    return gpu_demand(spec)[1]


def gpu_demand(spec: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
    """What a pod holds of GPUs, in one walk over its containers: the count of GPUs and MIG slices
    (an amount that is not an integer counts 1: it still makes a GPU pod) and, per resource, the
    integer amounts (`gpu_requests`). Containers run together and add up; an init container runs
    alone before them, so the pod holds the larger of the two."""
    held, init_held = 0, 0
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        if asks_for_gpus(container):
            held += sum(container_gpu_amounts(container, unreadable=1).values())
            for name, amount in container_gpu_amounts(container).items():
                total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        if asks_for_gpus(container):
            init_held = max(init_held, sum(container_gpu_amounts(container, unreadable=1).values()))
            for name, amount in container_gpu_amounts(container).items():
                total[name] = max(total.get(name, 0), amount)
    return max(held, init_held), {name: amount for name, amount in total.items() if amount > 0}


def _requirement(expr: Any) -> Requirement | None:
    if not isinstance(expr, Mapping):
        return None
    op, values = _NODE_OPS.get(str(expr.get("operator"))), expr.get("values") or []
    if op is None or not isinstance(values, list):
        return None
    texts = frozenset(str(v) for v in values)
    if op in (">", "<") and (len(values) != 1 or not _INTEGER.fullmatch(str(values[0]))):
        return None
    return Requirement(str(expr.get("key", "")), op, texts)


def _term_matches(term: Any, labels: Mapping[str, str], name: str) -> bool:
    """A nodeSelectorTerm: its expressions ANDed; an empty or unreadable term matches nothing."""
    if not isinstance(term, Mapping):
        return False
    found = False
    for key, subject in (("matchExpressions", labels), ("matchFields", {"metadata.name": name})):
        exprs = term.get(key) or []
        if not isinstance(exprs, list):
            return False
        for expr in exprs:
            requirement = _requirement(expr)
            if requirement is None or not requirement.matches(subject):
                return False
            found = True
    return found


def affinity_admits(affinity: Mapping[str, Any] | None, labels: Mapping[str, str], name: str) -> bool:
    """The pod's requiredDuringSchedulingIgnoredDuringExecution node affinity: terms ORed."""
    found: Any = affinity
    for key in ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"):
        if found is None:
            return True
        if not isinstance(found, Mapping):
            return False
        found = found.get(key)
    if found is None:
        return True
    terms = found.get("nodeSelectorTerms") if isinstance(found, Mapping) else None
    if not isinstance(terms, list):
        return False
    return any(_term_matches(term, labels, name) for term in terms)


def untolerated(node_taints: tuple[Taint, ...], pod_tolerations: tuple[Toleration, ...]) -> list[Taint]:
    """The node's NoSchedule/NoExecute taints the pod does not tolerate."""
    return [
        t for t in node_taints if t.effect in BLOCKING_EFFECTS and not any(tol.tolerates(t) for tol in pod_tolerations)
    ]


def may_land(
    node_selector: Mapping[str, str],
    affinity: Mapping[str, Any] | None,
    pod_tolerations: tuple[Toleration, ...],
    labels: Mapping[str, str],
    name: str,
    node_taints: tuple[Taint, ...],
) -> bool:
    return (
        node_selector_matches(node_selector, labels)
        and affinity_admits(affinity, labels, name)
        and not untolerated(node_taints, pod_tolerations)
    )
