"""ReplicaSet and StatefulSet pods come back after an eviction, and a tiny scheduler places them.

A pod owned by a ReplicaSet or StatefulSet that is deleted is replaced at once by a Pending,
unscheduled pod (so PodDisruptionBudgets keep counting it as expected but not healthy). The
scheduler binds pending pods to a Ready, schedulable node whose nodeSelector matches and whose free
`nvidia.com/gpu` and MIG slices (`nvidia.com/mig-*`) cover the request; the pod turns Ready after
`workload_ready_delay`.
"""

from __future__ import annotations

import copy
from typing import Any

from upgrader.core.selectors import node_selector_matches
from upgrader.sim.clock import rfc3339
from upgrader.sim.podutil import gpu_requests, is_terminal, set_ready
from upgrader.sim.settings import GPU, SimSettings
from upgrader.sim.store import Store
from upgrader.sim.watch import Change

Obj = dict[str, Any]
REPLACED_KINDS = ("ReplicaSet", "StatefulSet")


def replaced_owner(pod: Obj) -> Obj | None:
    """The ReplicaSet or StatefulSet controlling the pod, if one does."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in REPLACED_KINDS:
            return dict(ref)
    return None


class WorkloadController:
    def __init__(self, store: Store, settings: SimSettings) -> None:
        self.store = store
        self.settings = settings
        self.pods = store.type("", "v1", "pods")
        self.nodes = store.type("", "v1", "nodes")
        self._retry_pending = False

    def react(self, change: Change) -> None:
        if change.key == self.pods.key and change.type == "DELETED":
            owner = replaced_owner(change.new)
            if owner is not None and not is_terminal(change.new):
                self._replace(change.new, owner)
        elif change.key == self.nodes.key and change.type == "MODIFIED":
            old_spec, new_spec = (change.old or {}).get("spec") or {}, change.new.get("spec") or {}
            if old_spec.get("unschedulable") and not new_spec.get("unschedulable"):
                self.store.scheduler.after(0, "schedule pending pods", self.schedule_pending)

    def _replace(self, gone: Obj, owner: Obj) -> None:
        meta = gone["metadata"]
        name = meta["name"] if owner["kind"] == "StatefulSet" else f"{owner['name']}-{self.store.random_suffix()}"
        spec = copy.deepcopy(gone.get("spec") or {})
        spec.pop("nodeName", None)
        pod = {
            "metadata": {
                "name": name,
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": copy.deepcopy(meta.get("ownerReferences") or []),
            },
            "spec": spec,
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        }
        self.store.create(self.pods, meta["namespace"], pod)
        self.store.scheduler.after(0, "schedule pending pods", self.schedule_pending)

    def free(self, node: Obj, resource: str = GPU) -> int:
        """Allocatable `resource` (nvidia.com/gpu, a MIG slice) not held by the node's live pods."""
        allocatable = ((node.get("status") or {}).get("allocatable") or {}).get(resource, "0")
        used = sum(
            gpu_requests(p).get(resource, 0) for p in self.store.pods_on(node["metadata"]["name"]) if not is_terminal(p)
        )
        try:
            return int(allocatable) - used
        except ValueError:
            return 0

    def _fits(self, node: Obj, pod: Obj) -> bool:
        status = node.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if not ready or (node.get("spec") or {}).get("unschedulable"):
            return False
        if not node_selector_matches((pod.get("spec") or {}).get("nodeSelector"), node["metadata"].get("labels") or {}):
            return False
        return all(self.free(node, resource) >= amount for resource, amount in gpu_requests(pod).items())

    def schedule_pending(self) -> None:
        """Bind every pending workload pod that fits somewhere; retry later while some do not."""
        self._retry_pending = False
        pending = [
            p
            for p in self.store.objects(self.pods)
            if not (p.get("spec") or {}).get("nodeName")
            and replaced_owner(p) is not None
            and not p["metadata"].get("deletionTimestamp")
        ]
        for pod in sorted(pending, key=lambda p: p["metadata"]["creationTimestamp"]):
            nodes = [n for n in self.store.objects(self.nodes) if self._fits(n, pod)]
            if not nodes:
                self._retry_pending = True
                continue
            best = min(nodes, key=lambda n: (-self.free(n), n["metadata"]["name"]))
            self._bind(pod, best["metadata"]["name"])
        if self._retry_pending:
            self.store.scheduler.after(self.settings.workload_ready_delay, "retry pending pods", self.schedule_pending)

    def _bind(self, pod: Obj, node_name: str) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        now = rfc3339(self.store.clock.now())

        def bind(p: Obj) -> None:
            p["spec"]["nodeName"] = node_name
            p["status"] = {
                "phase": "Running",
                "startTime": now,
                "podIP": "10.244.1.10",
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
                "containerStatuses": [
                    {
                        "name": c.get("name", ""),
                        "image": c.get("image", ""),
                        "ready": False,
                        "restartCount": 0,
                        "started": True,
                        "state": {"running": {"startedAt": now}},
                    }
                    for c in p["spec"].get("containers") or []
                ],
            }

        self.store.mutate(self.pods, ns, name, bind)
        self.ready_later(pod, node_name)

    def ready_later(self, pod: Obj, node_name: str | None = None) -> None:
        """The bound pod turns Ready after `workload_ready_delay`, if it is still that pod."""
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        node_name = node_name or str((pod.get("spec") or {}).get("nodeName") or "")

        def ready() -> None:
            current = self.store.find(self.pods, ns, name)
            if (
                current is not None
                and current["metadata"]["uid"] == uid
                and not current["metadata"].get("deletionTimestamp")
            ):
                stamp = rfc3339(self.store.clock.now())
                self.store.mutate(self.pods, ns, name, lambda p: set_ready(p, True, stamp))

        delay = self.settings.delay("workload_ready", node_name, self.settings.workload_ready_delay)
        self.store.scheduler.after(delay, f"pod {ns}/{name} ready", ready)
