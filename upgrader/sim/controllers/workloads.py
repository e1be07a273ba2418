"""ReplicaSet and StatefulSet pods come back after an eviction, and a small scheduler places them.

A pod owned by a ReplicaSet or StatefulSet that is deleted is replaced at once by a Pending,
unscheduled pod (so PodDisruptionBudgets keep counting it as expected but not healthy). The
scheduler binds pending pods where kube-scheduler's filters would (`node_fit`: cordons, taints and
tolerations, nodeSelector and required node affinity, free `nvidia.com/gpu` and MIG slices), on the
node it scores best: fewest PreferNoSchedule taints the pod does not tolerate (TaintToleration), then
the most free GPUs; a pod
that fits nowhere keeps `PodScheduled=False/Unschedulable` with kube-scheduler's message. Bound
pods turn Ready after `workload_ready_delay`.

Pending pods are tried again when something that could make room happens (a node added,
uncordoned, untainted, relabelled, Ready again or given more allocatable; a pod on a node gone or
finished; a pending pod's spec changed), and every `workload_ready_delay` while some wait. Such
triggers share one timer, and a pod's condition is written only when its message changes.
"""

from __future__ import annotations

import copy
from typing import Any, TypeGuard

from upgrader.sim.apiserver.clock import rfc3339
from upgrader.sim.apiserver.podutil import gpu_requests, is_terminal, node_of, set_ready
from upgrader.sim.apiserver.store import Store
from upgrader.sim.apiserver.timers import Timer
from upgrader.sim.apiserver.watch import Change
from upgrader.sim.controllers import node_fit
from upgrader.sim.controllers.node_fit import NodeLoad
from upgrader.sim.controllers.settings import GPU, SimSettings

Obj = dict[str, Any]
Key = tuple[str, str]
REPLACED_KINDS = ("ReplicaSet", "StatefulSet")


def replaced_owner(pod: Obj) -> Obj | None:
    """The ReplicaSet or StatefulSet controlling the pod, if one does."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in REPLACED_KINDS:
            return dict(ref)
    return None


def _waits(pod: Obj | None) -> TypeGuard[Obj]:
    """An unbound, live workload pod: one this scheduler owes a placement."""
    return (
        pod is not None
        and not node_of(pod)
        and replaced_owner(pod) is not None
        and not pod["metadata"].get("deletionTimestamp")
        and not is_terminal(pod)
    )


def _key(pod: Obj) -> Key:
    return (pod["metadata"].get("namespace") or "", pod["metadata"]["name"])


def _scheduled_condition(pod: Obj) -> Obj | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return dict(cond)
    return None


class WorkloadController:
    def __init__(self, store: Store, settings: SimSettings) -> None:
        self.store = store
        self.settings = settings
        self.pods = store.type("", "v1", "pods")
        self.nodes = store.type("", "v1", "nodes")
        self._waiting: set[Key] = set()  # pods `_waits` holds for, as the reactor saw them
        self._loads: dict[str, NodeLoad] = {}  # per node, until a pod on it changes
        self._seen_rv = 0  # the last write react saw
        self._stale = True  # writes ran no reactors (bulk load, restore): rescan before trusting the above
        self._soon: Timer | None = None
        self._retry: Timer | None = None

    # ----- reacting ---------------------------------------------------------------------------

    def react(self, change: Change) -> None:
        if change.rv != self._seen_rv + 1:
            self._stale = True
        self._seen_rv = change.rv
        if change.key == self.pods.key:
            self._pod_changed(change)
        elif change.key == self.nodes.key and (change.type == "ADDED" or _may_admit_more(change.old, change.new)):
            self._kick()

    def _pod_changed(self, change: Change) -> None:
        old, new = change.old, None if change.type == "DELETED" else change.new
        for node in {node_of(p) for p in (old, new) if p is not None} - {""}:
            self._loads.pop(node, None)
        key = _key(change.new)
        if _waits(new):
            self._waiting.add(key)
            if old is None or not _waits(old) or old.get("spec") != change.new.get("spec"):
                self._kick()  # a new pending pod, or its tolerations/affinity changed
        else:
            self._waiting.discard(key)
        if change.type == "DELETED":
            owner = replaced_owner(change.new)
            if owner is not None and not is_terminal(change.new):
                self._replace(change.new, owner)
        if old is not None and node_of(old) and not is_terminal(old) and (new is None or is_terminal(new)):
            self._kick()  # a bound pod is gone or finished: room freed

    def _kick(self) -> None:
        """Try pending pods soon: one timer, however many changes ask before it fires."""
        if self._soon is None and (self._waiting or self._stale):
            self._soon = self.store.timers.after(0, "schedule pending pods", self._run)

    def _replace(self, gone: Obj, owner: Obj) -> None:
        meta = gone["metadata"]
        name = meta["name"] if owner["kind"] == "StatefulSet" else f"{owner['name']}-{self.store.random_suffix()}"
        spec = copy.deepcopy(gone.get("spec") or {})
        spec.pop("nodeName", None)
        now = rfc3339(self.store.clock.now())
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
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": now}
                ],
            },
        }
        self.store.create(self.pods, meta["namespace"], pod)  # its ADDED event asks for a pass

    # ----- what nodes hold ------------------------------------------------------------------

    def load(self, node_name: str) -> NodeLoad:
        """GPU resources held by the node's pods that have not finished, and their lowest priority."""
        # Trust the cache only while this reactor has seen every write (none bulk-loaded or queued).
        current = not self._stale and self.store.resource_version == self._seen_rv
        cached = self._loads.get(node_name) if current else None
        if cached is None:
            used: dict[str, int] = {}
            lowest: int | None = None
            for pod in self.store.pods_on(node_name):
                if is_terminal(pod):
                    continue  # kube-scheduler's informer drops Succeeded and Failed pods
                for resource, amount in gpu_requests(pod).items():
                    used[resource] = used.get(resource, 0) + amount
                p = node_fit.priority(pod)
                lowest = p if lowest is None else min(lowest, p)
            cached = NodeLoad(used, lowest)
            if current:
                self._loads[node_name] = cached
        return cached

    def _lower_load(self, node_name: str, below: int) -> dict[str, int]:
        used: dict[str, int] = {}
        for pod in self.store.pods_on(node_name):
            if not is_terminal(pod) and node_fit.priority(pod) < below:
                for resource, amount in gpu_requests(pod).items():
                    used[resource] = used.get(resource, 0) + amount
        return used

    def free(self, node: Obj, resource: str = GPU) -> int:
        """Allocatable `resource` (nvidia.com/gpu, a MIG slice) not held by the node's live pods."""
        return node_fit.allocatable(node, resource) - self.load(node["metadata"]["name"]).used.get(resource, 0)

    # ----- scheduling -----------------------------------------------------------------------

    def schedule_pending(self) -> None:
        """Look at every pod afresh, bind each pending workload pod that fits somewhere, and say why
        the others do not; retry later while some wait."""
        self._resync()
        self._run()

    def _resync(self) -> None:
        self._waiting = {_key(p) for p in self.store.objects(self.pods) if _waits(p)}
        self._loads.clear()
        self._seen_rv = self.store.resource_version
        self._stale = False

    def _run(self) -> None:
        self._soon = None
        if self._stale or self.store.resource_version != self._seen_rv:
            self._resync()  # a bulk load or a restore wrote without telling the reactors
        pending = [p for ns, name in self._waiting if _waits(p := self.store.find(self.pods, ns, name))]
        if not pending:
            return
        pending.sort(key=lambda p: (-node_fit.priority(p), p["metadata"]["creationTimestamp"], _key(p)))
        nodes = sorted(self.store.objects(self.nodes), key=lambda n: n["metadata"]["name"])
        by_name = {n["metadata"]["name"]: n for n in nodes}
        still_waiting = False
        for pod in pending:
            placement = node_fit.place(pod, nodes, gpu_requests(pod), self.load, self._lower_load)
            if placement.feasible:
                tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
                best = min(placement.feasible, key=lambda name: (
                    node_fit.intolerable_preferences(by_name[name], tolerations), -self.free(by_name[name]), name))
                self._bind(pod, best)
            else:
                still_waiting = True
                self._explain(pod, placement.message)
        if still_waiting and (self._retry is None or self._retry.cancelled or self._retry.due < self.store.clock.now()):
            self._retry = self.store.timers.after(
                self.settings.workload_ready_delay, "retry pending pods", self._run_retry
            )

    def _run_retry(self) -> None:
        self._retry = None
        self._run()

    def _explain(self, pod: Obj, message: str) -> None:
        """Set PodScheduled=False/Unschedulable with `message`, only when that changes something."""
        cond = _scheduled_condition(pod)
        if cond is not None and (cond.get("status"), cond.get("reason"), cond.get("message")) == (
            "False",
            "Unschedulable",
            message,
        ):
            return
        now = rfc3339(self.store.clock.now())
        since = cond.get("lastTransitionTime") if cond is not None and cond.get("status") == "False" else None

        def explain(p: Obj) -> None:
            status = p.setdefault("status", {})
            others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": since or now,
                    "reason": "Unschedulable",
                    "message": message,
                },
                *others,
            ]

        self.store.mutate(self.pods, pod["metadata"]["namespace"], pod["metadata"]["name"], explain)

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
                and not is_terminal(current)  # the kubelet rejected it (controllers/admission.py)
            ):
                stamp = rfc3339(self.store.clock.now())
                self.store.mutate(self.pods, ns, name, lambda p: set_ready(p, True, stamp))

        delay = self.settings.delay("workload_ready", node_name, self.settings.workload_ready_delay)
        self.store.timers.after(delay, f"pod {ns}/{name} ready", ready)


def _may_admit_more(old: Obj | None, new: Obj) -> bool:
    """Could this node change let a pod in that was kept out? (Cordon lifted, a blocking taint gone,
    labels changed, Ready again, more of some allocatable resource.)"""
    if old is None:
        return True
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if old_spec.get("unschedulable") and not new_spec.get("unschedulable"):
        return True
    blocking = [t for t in node_fit.node_taints(old) if t.get("effect") in node_fit.BLOCKING_EFFECTS]
    if any(t not in node_fit.node_taints(new) for t in blocking):
        return True
    if old["metadata"].get("labels") != new["metadata"].get("labels"):
        return True
    before = (old.get("status") or {}).get("allocatable") or {}
    after = (new.get("status") or {}).get("allocatable") or {}
    return any(node_fit.allocatable(new, r) > node_fit.allocatable(old, r) for r in {*before, *after})
