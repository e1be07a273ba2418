"""The `pods/eviction` subresource and the budget arithmetic behind it.

A PodDisruptionBudget's numbers (expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed)
as the disruption controller computes them; the API server's eviction verdict uses the same
arithmetic over the pods it holds, so a budget's status written a moment ago cannot mislead it.
"""

from __future__ import annotations

import math
from typing import Any

from upgrader.core.model.selectors import SelectorError, from_label_selector_object
from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.podutil import is_ready, is_terminal, is_terminating
from upgrader.sim.apiserver.store import Store

Obj = dict[str, Any]


def scaled(value: int | str, total: int) -> int:
    """intstr scaling as the disruption controller does it: percentages round up."""
    if isinstance(value, str):
        text = value.strip()
        if not text.endswith("%"):
            return int(text)
        return math.ceil(int(text[:-1]) * total / 100)
    return int(value)


def compute_status(pdb: Obj, pods: list[Obj]) -> Obj:
    """expectedPods, currentHealthy, desiredHealthy and disruptionsAllowed for one budget.

    Healthy pods are Ready and not terminating. With an integer minAvailable the expected count
    is every pod the selector matches, as in the real controller; with a percentage or
    maxUnavailable the real controller adds up the owning controllers' scale, for which the
    emulator counts the matching pods that have not finished (terminating ones included).
    """
    spec = pdb.get("spec") or {}
    try:
        selector = from_label_selector_object(spec.get("selector"))
    except SelectorError:
        selector = from_label_selector_object(None)
    selected = [p for p in pods if selector.matches(p["metadata"].get("labels"))]
    running = [p for p in selected if not is_terminal(p)]
    healthy = sum(1 for p in running if is_ready(p) and not is_terminating(p))
    min_available = spec.get("minAvailable")
    if spec.get("maxUnavailable") is not None:
        expected = len(running)
        desired = max(0, expected - scaled(spec["maxUnavailable"], expected))
    elif isinstance(min_available, int):
        expected, desired = len(selected), min_available
    elif min_available is not None:
        expected = len(running)
        desired = scaled(min_available, expected)
    else:
        expected = desired = len(running)  # policy/v1 rejects this; be strict if it gets stored anyway
    allowed = max(0, healthy - desired) if expected > 0 else 0
    return {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }


def evict(store: Store, namespace: str, name: str, body: Obj) -> Obj:
    """The `pods/eviction` subresource: delete the pod unless a PDB forbids it (then 429)."""
    pods = store.type("", "v1", "pods")
    pdbs = store.type("policy", "v1", "poddisruptionbudgets")
    if (body.get("metadata") or {}).get("name") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") or {}
    grace = options.get("gracePeriodSeconds")
    preconditions = options.get("preconditions")
    with store.lock:
        pod = store.get(pods, namespace, name)
        if _can_ignore_pdb(pod):
            store.delete(pods, namespace, name, grace, preconditions)
            return _success()
        covering = []
        for pdb in store.objects(pdbs, namespace):
            try:
                selector = from_label_selector_object((pdb.get("spec") or {}).get("selector"))
            except SelectorError:
                continue
            if selector.matches(pod["metadata"].get("labels")):
                covering.append(pdb)
        if len(covering) > 1:
            raise errors.ApiError(
                500,
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
            )
        if covering:
            pdb = covering[0]
            status = compute_status(pdb, store.objects(pods, namespace))
            # An unready pod may go under AlwaysAllow, or (IfHealthyBudget, the default) while the
            # budget is met and asks for at least one healthy pod; anything else needs a
            # disruption to spare.
            policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
            unhealthy_ok = not is_ready(pod) and (
                policy == "AlwaysAllow" or 0 < status["desiredHealthy"] <= status["currentHealthy"]
            )
            if not unhealthy_ok and status["disruptionsAllowed"] <= 0:
                raise errors.pdb_refusal(
                    pdb["metadata"]["name"], status["desiredHealthy"], status["currentHealthy"]
                )
        store.delete(pods, namespace, name, grace, preconditions)
        return _success()


def _can_ignore_pdb(pod: Obj) -> bool:
    """Pods whose eviction skips the budgets: finished, still Pending, or already terminating."""
    return is_terminal(pod) or is_terminating(pod) or (pod.get("status") or {}).get("phase") == "Pending"


def _success() -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
