"""DaemonSets and their ControllerRevisions.

What the controller under test relies on:
- a template change makes a new ControllerRevision (hash computed like the real controller);
- a deleted DaemonSet pod comes back after a delay from the newest template, with that
  revision's `controller-revision-hash`, and turns Ready after another delay, unless its image is
  missing from the emulated registry (then it stays not-ready with an image pull error);
- `updateStrategy` OnDelete (what upgrader needs) leaves old pods alone; RollingUpdate deletes old
  pods itself, while fewer than `maxUnavailable` (default 1, or a percentage of the desired pods,
  rounded up) are unavailable, as the real controller's surge-less rolling update does;
- the GPU driver's pods also drive their node's GPUs and validators (`driver.py`).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from upgrader.core.model.selectors import node_selector_matches
from upgrader.sim.apiserver.clock import rfc3339
from upgrader.sim.apiserver.podutil import is_ready, is_terminal, is_terminating, node_of, set_ready
from upgrader.sim.apiserver.store import NAME_ALPHABET, Store
from upgrader.sim.apiserver.watch import Change
from upgrader.sim.controllers.driver import DriverLifecycle, driver_version, is_driver_daemonset
from upgrader.sim.controllers.kubelet import container_status, mark_image_pull_error, mark_running, report_ready
from upgrader.sim.controllers.settings import VALIDATOR_APP, SimSettings

# What other code imports from here; the driver helpers live in driver.py.
__all__ = ["HASH_LABEL", "DaemonSetController", "driver_version", "is_driver_daemonset", "revision_hash"]

Obj = dict[str, Any]
HASH_LABEL = "controller-revision-hash"


def revision_hash(template: Obj, collision_count: int = 0) -> str:
    """FNV-1a 32 of the template, encoded with the API machinery's safe alphabet."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(NAME_ALPHABET[ord(ch) % len(NAME_ALPHABET)] for ch in str(h))


class DaemonSetController:
    def __init__(self, store: Store, settings: SimSettings) -> None:
        self.store = store
        self.settings = settings
        self.ds = store.type("apps", "v1", "daemonsets")
        self.revisions = store.type("apps", "v1", "controllerrevisions")
        self.pods = store.type("", "v1", "pods")
        self.nodes = store.type("", "v1", "nodes")
        self._pending: set[tuple[str, str]] = set()  # (daemonset uid, node) with a create queued
        self.driver = DriverLifecycle(store, settings, self.daemonset_of)

    @property
    def incidents(self) -> list[str]:
        """Driver restarts that happened while GPU workloads still ran on the node."""
        return self.driver.incidents

    def refresh_validators(self, node_name: str) -> None:
        """Re-evaluate a node's validators (see `DriverLifecycle`)."""
        self.driver.refresh_validators(node_name)

    # ----- reactions ------------------------------------------------------------------------

    def react(self, change: Change) -> None:
        if change.key == self.ds.key and change.type != "DELETED":
            if change.old is None or change.old.get("spec") != change.new.get("spec"):
                self.sync_daemonset(change.new)
        elif change.key == self.nodes.key:
            self._node_changed(change)
        elif change.key == self.pods.key:
            self._pod_changed(change)

    def _node_changed(self, change: Change) -> None:
        node = change.new
        name = node["metadata"]["name"]
        if change.type == "DELETED":
            for pod in self._pods_on(name):
                self.store.remove(self.pods, pod)
            return
        self.driver.node_changed(node)
        old_labels = (change.old or {}).get("metadata", {}).get("labels")
        if change.old is None or old_labels != node["metadata"].get("labels"):
            for ds in self.store.objects(self.ds):
                self.sync_node(ds, node)

    def _pod_changed(self, change: Change) -> None:
        owner = _ds_owner(change.new)
        if owner is None:
            return
        ds = self._ds_by_uid(owner.get("uid", ""), change.new["metadata"]["namespace"])
        old, new = change.old, change.new
        stopping = old is not None and not is_terminating(old)
        if stopping and ds is not None and (change.type == "DELETED" or is_terminating(new)):
            self.driver.stopping(ds, new)
        if change.type == "DELETED" and ds is not None:
            node = self.store.find(self.nodes, None, node_of(new))
            if node is not None:
                self.sync_node(ds, node)
        if ds is not None:
            self.update_status(ds)

    # ----- revisions ------------------------------------------------------------------------

    def ensure_revision(self, ds: Obj) -> Obj:
        """The ControllerRevision for the DaemonSet's current template, created if new."""
        m = ds["metadata"]
        template = (ds.get("spec") or {}).get("template") or {}
        owned = self.revisions_of(ds)
        newest = max((r.get("revision", 0) for r in owned), default=0)
        for rev in owned:
            stored = dict((rev.get("data") or {}).get("spec", {}).get("template") or {})
            stored.pop("$patch", None)  # how the real controller stores it, not part of the template
            if stored == template:
                if rev.get("revision", 0) != newest:
                    return (
                        self.store.mutate(
                            self.revisions,
                            m["namespace"],
                            rev["metadata"]["name"],
                            lambda r: r.__setitem__("revision", newest + 1),
                        )
                        or rev
                    )
                return rev
        collision = int((ds.get("status") or {}).get("collisionCount", 0))
        digest = revision_hash(template, collision)
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels[HASH_LABEL] = digest
        return self.store.create(
            self.revisions,
            m["namespace"],
            {
                "metadata": {
                    "name": f"{m['name']}-{digest}",
                    "labels": labels,
                    "ownerReferences": [_owner_ref(ds)],
                },
                "data": {"spec": {"template": {**copy.deepcopy(template), "$patch": "replace"}}},
                "revision": newest + 1,
            },
        )

    def revisions_of(self, ds: Obj) -> list[Obj]:
        uid = ds["metadata"]["uid"]
        return [
            r
            for r in self.store.objects(self.revisions, ds["metadata"]["namespace"])
            if any(o.get("uid") == uid for o in r["metadata"].get("ownerReferences") or [])
        ]

    def newest_revision(self, ds: Obj) -> Obj:
        revs = self.revisions_of(ds)
        return max(revs, key=lambda r: r.get("revision", 0)) if revs else self.ensure_revision(ds)

    # ----- pods per node --------------------------------------------------------------------

    def sync_daemonset(self, ds: Obj) -> None:
        self.ensure_revision(ds)
        for node in self.store.objects(self.nodes):
            self.sync_node(ds, node)
        self.update_status(ds)

    def sync_node(self, ds: Obj, node: Obj, delay: float | None = None) -> None:
        name = node["metadata"]["name"]
        ours = [p for p in self._pods_on(name) if (_ds_owner(p) or {}).get("uid") == ds["metadata"]["uid"]]
        if not self._wants(ds, node):
            for pod in ours:
                if not is_terminating(pod):
                    self.store.delete(self.pods, pod["metadata"]["namespace"], pod["metadata"]["name"])
            return
        key = (ds["metadata"]["uid"], name)
        if ours or key in self._pending:
            return
        self._pending.add(key)
        uid, ns, ds_name = ds["metadata"]["uid"], ds["metadata"]["namespace"], ds["metadata"]["name"]

        def create() -> None:
            self._pending.discard(key)
            current = self.store.find(self.ds, ns, ds_name)
            fresh_node = self.store.find(self.nodes, None, name)
            if current is None or current["metadata"]["uid"] != uid or fresh_node is None:
                return
            if self._wants(current, fresh_node) and not [
                p for p in self._pods_on(name) if (_ds_owner(p) or {}).get("uid") == uid
            ]:
                self.create_pod(current, name)

        self.store.timers.after(
            self.settings.delay("pod_recreate", name, self.settings.pod_recreate_delay) if delay is None else delay,
            f"daemonset {ns}/{ds_name} pod for {name}",
            create,
        )

    def _wants(self, ds: Obj, node: Obj) -> bool:
        template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        return node_selector_matches(template_spec.get("nodeSelector"), node["metadata"].get("labels") or {})

    def create_pod(self, ds: Obj, node_name: str, ready_now: bool = False) -> Obj:
        """Create the DaemonSet's pod for a node from the newest template; seeding may start Ready."""
        revision = self.newest_revision(ds)
        template = copy.deepcopy((ds.get("spec") or {}).get("template") or {})
        t_meta = template.get("metadata") or {}
        labels = dict(t_meta.get("labels") or {})
        labels[HASH_LABEL] = revision["metadata"]["labels"][HASH_LABEL]
        labels["pod-template-generation"] = str(ds["metadata"].get("generation", 1))
        spec = template.get("spec") or {}
        spec["nodeName"] = node_name
        now = rfc3339(self.store.clock.now())
        containers = spec.get("containers") or []
        body: Obj = {
            "metadata": {
                "name": f"{ds['metadata']['name']}-{self.store.random_suffix()}",
                "labels": labels,
                "annotations": dict(t_meta.get("annotations") or {}),
                "ownerReferences": [_owner_ref(ds)],
            },
            "spec": spec,
            "status": {
                "phase": "Running" if ready_now else "Pending",
                "hostIP": "10.0.0.1",
                "startTime": now,
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
                "containerStatuses": [container_status(c, running=ready_now, now=now) for c in containers],
            },
        }
        if not ready_now:
            set_ready(body, False, now, "ContainersNotReady")  # as the kubelet reports a starting pod
        pod = self.store.create(self.pods, ds["metadata"]["namespace"], body)
        if ready_now:
            report_ready(self.store, self.pods, pod, True)
        else:
            self.start(pod)
        return pod

    def start(self, pod: Obj, attempt: int = 0) -> None:
        """Pull the pod's images and run it; a missing image is ImagePullBackOff, retried as the
        kubelet retries it (back-off doubling from `image_pull_backoff`, at most five minutes), so
        publishing the image later brings the pod up."""
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        images = [c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or []]
        missing = next((i for i in images if not self.settings.image_available(i)), None)

        def alive() -> Obj | None:
            p = self.store.find(self.pods, ns, name)
            live = p is not None and p["metadata"]["uid"] == uid and not is_terminating(p) and not is_terminal(p)
            return p if live else None  # a pod the kubelet rejected (controllers/admission.py) never starts

        if missing is not None:

            def pull_failed() -> None:
                current = alive()
                if current is None:
                    return
                now = rfc3339(self.store.clock.now())
                self.store.mutate(self.pods, ns, name, lambda p: mark_image_pull_error(p, missing, now))
                backoff = min(300.0, self.settings.image_pull_backoff * 2 ** min(attempt, 16))
                retry = lambda: self._retry(ns, name, uid, attempt)  # noqa: E731
                self.store.timers.after(backoff, f"retry pull {missing}", retry)

            pull_delay = self.settings.delay("image_pull", node_of(pod), self.settings.image_pull_delay)
            self.store.timers.after(pull_delay, f"pull {missing}", pull_failed)
            return

        def running() -> None:
            p = alive()
            if p is not None:
                self.store.mutate(
                    self.pods, ns, name, lambda obj: mark_running(obj, rfc3339(self.store.clock.now()))
                )
                p = alive()
                if p is not None:
                    self._became_running(p)

        def start_running() -> None:
            ready_delay = self.settings.delay("pod_ready", node_of(pod), self.settings.pod_ready_delay)
            self.store.timers.after(ready_delay, f"start {ns}/{name}", running)

        if not self.driver.hold_for_safe_load(pod, start_running):
            start_running()

    def _retry(self, ns: str, name: str, uid: str, attempt: int) -> None:
        pod = self.store.find(self.pods, ns, name)
        if pod is not None and pod["metadata"]["uid"] == uid and not is_terminating(pod):
            self.start(pod, attempt + 1)

    def _became_running(self, pod: Obj) -> None:
        if (pod["metadata"].get("labels") or {}).get("app") == VALIDATOR_APP:
            self.driver.refresh_validators(node_of(pod))
            return
        report_ready(self.store, self.pods, pod, True)
        ds = self.daemonset_of(pod)
        if ds is not None and is_driver_daemonset(ds):
            self.driver.ready(ds, node_of(pod))

    # ----- status ---------------------------------------------------------------------------

    def update_status(self, ds: Obj) -> None:
        uid = ds["metadata"]["uid"]
        current = self.store.find(self.ds, ds["metadata"]["namespace"], ds["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != uid:
            return
        pods = [
            p
            for p in self.store.objects(self.pods, ds["metadata"]["namespace"])
            if (_ds_owner(p) or {}).get("uid") == uid and not is_terminating(p)
        ]
        newest = self.newest_revision(current)["metadata"]["labels"][HASH_LABEL]
        desired = sum(1 for n in self.store.objects(self.nodes) if self._wants(current, n))
        ready = sum(1 for p in pods if is_ready(p))
        status = {
            "currentNumberScheduled": len(pods),
            "desiredNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": max(0, desired - ready),
            "updatedNumberScheduled": sum(
                1 for p in pods if (p["metadata"].get("labels") or {}).get(HASH_LABEL) == newest
            ),
            "observedGeneration": current["metadata"].get("generation", 1),
        }
        self.store.mutate(
            self.ds,
            ds["metadata"]["namespace"],
            ds["metadata"]["name"],
            lambda d: d.setdefault("status", {}).update(status),
        )
        self._roll(current, pods, newest, desired - ready)

    def _roll(self, ds: Obj, pods: list[Obj], newest: str, unavailable: int) -> None:
        """Under RollingUpdate, delete old pods while the budget of unavailable pods allows (not-ready
        old pods first, as the real controller takes them); OnDelete waits for a client to delete them."""
        strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return
        desired = unavailable + sum(1 for p in pods if is_ready(p))
        budget = _max_unavailable((strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1), desired)
        old = [p for p in pods if (p["metadata"].get("labels") or {}).get(HASH_LABEL) != newest]
        for pod in sorted(old, key=is_ready)[: max(0, budget - unavailable)]:
            self.driver.rolled.add(pod["metadata"]["name"])
            self.store.delete(self.pods, pod["metadata"]["namespace"], pod["metadata"]["name"])

    # ----- lookups --------------------------------------------------------------------------

    def _pods_on(self, node_name: str) -> list[Obj]:
        return self.store.pods_on(node_name)

    def _ds_by_uid(self, uid: str, namespace: str) -> Obj | None:
        return next((d for d in self.store.objects(self.ds, namespace) if d["metadata"]["uid"] == uid), None)

    def daemonset_of(self, pod: Obj) -> Obj | None:
        """The DaemonSet controlling a pod, if it still exists."""
        owner = _ds_owner(pod)
        return self._ds_by_uid(owner.get("uid", ""), pod["metadata"]["namespace"]) if owner else None


def _max_unavailable(value: Any, desired: int) -> int:
    """`rollingUpdate.maxUnavailable`: a count, or a percentage of the desired pods rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * desired // 100)
    return int(value)


def _ds_owner(pod: Obj) -> Obj | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "DaemonSet" and ref.get("controller"):
            return dict(ref)
    return None


def _owner_ref(ds: Obj) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": ds["metadata"]["name"],
        "uid": ds["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }

