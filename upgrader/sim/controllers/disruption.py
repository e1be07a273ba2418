"""PodDisruptionBudgets' status, written as the disruption controller does (arithmetic: eviction.py)."""

from __future__ import annotations

from typing import Any

from upgrader.core.model.selectors import SelectorError, from_label_selector_object
from upgrader.sim.apiserver.clock import rfc3339
from upgrader.sim.apiserver.eviction import compute_status
from upgrader.sim.apiserver.store import Store
from upgrader.sim.apiserver.watch import Change

Obj = dict[str, Any]


class DisruptionController:
    """Keeps every PDB's status current as pods and budgets change."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pods = store.type("", "v1", "pods")
        self.pdbs = store.type("policy", "v1", "poddisruptionbudgets")

    def react(self, change: Change) -> None:
        if change.key == self.pdbs.key and change.type != "DELETED":
            self.refresh(change.new)
        elif change.key == self.pods.key:
            ns = change.new["metadata"].get("namespace")
            labels = [c["metadata"].get("labels") for c in (change.old, change.new) if c]
            for pdb in self.store.objects(self.pdbs, ns):
                try:
                    selector = from_label_selector_object((pdb.get("spec") or {}).get("selector"))
                except SelectorError:
                    continue
                if any(selector.matches(lbl) for lbl in labels):
                    self.refresh(pdb)

    def refresh_all(self) -> None:
        """Recompute every budget's status, reading the pods once (after a bulk load).

        Pods are indexed by namespace and label, so a budget whose selector requires a label value
        (`app: x`, `app in (x, y)`) looks only at the pods carrying it, not at its whole namespace.
        """
        by_namespace: dict[str, list[Obj]] = {}
        by_label: dict[tuple[str, str, str], list[Obj]] = {}
        for pod in self.store.objects(self.pods):
            m = pod["metadata"]
            by_namespace.setdefault(m["namespace"], []).append(pod)
            for key, value in (m.get("labels") or {}).items():
                by_label.setdefault((m["namespace"], key, value), []).append(pod)
        for pdb in self.store.objects(self.pdbs):
            ns = pdb["metadata"]["namespace"]
            candidates = by_namespace.get(ns, [])
            try:
                selector = from_label_selector_object((pdb.get("spec") or {}).get("selector"))
                required = next((r for r in selector.requirements if r.op in ("=", "in")), None)
            except SelectorError:
                required = None
            if required is not None:  # a superset of what the selector matches: compute_status re-checks
                candidates = [p for v in sorted(required.values) for p in by_label.get((ns, required.key, v), [])]
            self.refresh(pdb, candidates)

    def refresh(self, pdb: Obj, pods: list[Obj] | None = None) -> Obj:
        """Recompute one budget's status; `pods` are its namespace's pods, read here if not given."""
        m = pdb["metadata"]
        if pods is None:
            pods = self.store.objects(self.pods, m["namespace"])
        computed = compute_status(pdb, pods)
        now = rfc3339(self.store.clock.now())

        def update(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            old_allowed = status.get("disruptionsAllowed")
            status.update(computed)
            allowed = computed["disruptionsAllowed"] > 0
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionAllowed"]
            previous = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None
            )
            changed = previous is None or old_allowed is None or (old_allowed > 0) != allowed
            conditions.append(
                {
                    "type": "DisruptionAllowed",
                    "status": "True" if allowed else "False",
                    "reason": "SufficientPods" if allowed else "InsufficientPods",
                    "message": "",
                    "observedGeneration": computed["observedGeneration"],
                    "lastTransitionTime": now
                    if changed
                    else previous.get("lastTransitionTime", now)
                    if previous
                    else now,
                }
            )
            status["conditions"] = conditions

        return self.store.mutate(self.pdbs, m["namespace"], m["name"], update) or pdb
