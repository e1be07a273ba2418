"""batch/v1 Jobs whose pods run for a set time (`sim.upgrader.io/run-seconds`, or forever)."""

from __future__ import annotations

import copy
from typing import Any

from upgrader.core.model.selectors import node_selector_matches
from upgrader.sim.apiserver.clock import rfc3339
from upgrader.sim.apiserver.podutil import is_terminal, is_terminating, set_ready
from upgrader.sim.apiserver.store import Store
from upgrader.sim.apiserver.watch import Change
from upgrader.sim.controllers.admission import REJECTED, GpuAdmission
from upgrader.sim.controllers.settings import JOB_RUN_SECONDS, SimSettings

Obj = dict[str, Any]
REJECTED_BACKOFF = 10.0  # seconds: the Job controller's first backoff after a failed pod


def _rejected(change: Change) -> bool:
    old, new = change.old, change.new
    return (old is None or not is_terminal(old)) and (new.get("status") or {}).get("reason") == REJECTED




def run_seconds(job: Obj) -> float | None:
    """How long each pod of the job runs; None means it never finishes."""
    raw = (job["metadata"].get("annotations") or {}).get(JOB_RUN_SECONDS, "30")
    if raw.strip().lower() in ("never", "forever", "-1"):
        return None
    return float(raw)


class JobController:
    def __init__(self, store: Store, settings: SimSettings, admission: GpuAdmission | None = None) -> None:
        self.store = store
        self.settings = settings
        self.admission = admission or GpuAdmission(store)  # the kubelet's, for the pods it creates bound
        self.jobs = store.type("batch", "v1", "jobs")
        self.pods = store.type("", "v1", "pods")
        self.nodes = store.type("", "v1", "nodes")

    def react(self, change: Change) -> None:
        if change.key == self.jobs.key and change.type == "ADDED":
            self.ensure_pods(change.new)
        elif change.key == self.pods.key and change.type == "DELETED":
            uid = self._job_uid(change.new)
            if uid:
                ns = change.new["metadata"]["namespace"]
                node = (change.new.get("spec") or {}).get("nodeName") or ""
                delay = self.settings.delay("job_replace", node, self.settings.job_replace_delay)
                self.store.timers.after(delay, "job replaces pod", lambda: self._resync(ns, uid))
        elif change.key == self.pods.key and _rejected(change):
            # The kubelet refused it (controllers/admission.py): the Job controller tries again after its
            # backoff (10 s at first), as it does for a failed pod.
            job = self._job_uid(change.new)
            if job:
                space = str(change.new["metadata"]["namespace"])
                self.store.timers.after(REJECTED_BACKOFF, "job replaces rejected pod", lambda: self._resync(space, job))

    def _job_uid(self, pod: Obj) -> str | None:
        for ref in pod["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Job" and ref.get("controller"):
                return str(ref.get("uid"))
        return None

    def _resync(self, namespace: str, uid: str) -> None:
        job = next((j for j in self.store.objects(self.jobs, namespace) if j["metadata"]["uid"] == uid), None)
        if job is not None:
            self.ensure_pods(job)

    def ensure_pods(self, job: Obj) -> None:
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        completions = int(spec.get("completions", 1))
        succeeded = int(status.get("succeeded", 0))
        uid = job["metadata"]["uid"]
        active = [
            p
            for p in self.store.objects(self.pods, job["metadata"]["namespace"])
            if self._job_uid(p) == uid and not is_terminal(p) and not is_terminating(p)
        ]
        wanted = min(int(spec.get("parallelism", 1)), completions - succeeded) - len(active)
        for _ in range(max(0, wanted)):
            self._create_pod(job)
        self._set_active(job)

    def _create_pod(self, job: Obj) -> Obj | None:
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        pod_spec = template.get("spec") or {}
        node = pod_spec.get("nodeName") or self._pick_node(pod_spec)
        if not node:
            return None
        pod_spec["nodeName"] = node
        m = job["metadata"]
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update(
            {
                "job-name": m["name"],
                "batch.kubernetes.io/job-name": m["name"],
                "controller-uid": m["uid"],
                "batch.kubernetes.io/controller-uid": m["uid"],
            }
        )
        now = rfc3339(self.store.clock.now())
        body: Obj = {
            "metadata": {
                "name": f"{m['name']}-{self.store.random_suffix()}",
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": m["name"],
                        "uid": m["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pod_spec,
            "status": {
                "phase": "Running",
                "startTime": now,
                "conditions": [],
                "containerStatuses": [
                    {
                        "name": c.get("name", ""),
                        "image": c.get("image", ""),
                        "ready": True,
                        "restartCount": 0,
                        "started": True,
                        "state": {"running": {"startedAt": now}},
                    }
                    for c in pod_spec.get("containers") or []
                ],
            },
        }
        self.admission.admit(body, now)  # born bound and running: the kubelet judges it first
        pod = self.store.create(self.pods, m["namespace"], body)
        if is_terminal(pod):
            return pod
        self.store.mutate(
            self.pods, m["namespace"], pod["metadata"]["name"], lambda p: set_ready(p, True, now)
        )
        seconds = run_seconds(job)
        if seconds is not None:
            seconds = self.settings.delay("job_run", node, seconds)
            ns, name, uid = m["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
            self.store.timers.after(
                seconds, f"job pod {ns}/{name} finishes", lambda: self.finish(ns, name, uid)
            )
        return pod

    def _pick_node(self, pod_spec: Obj) -> str | None:
        """The least-loaded schedulable node the pod's nodeSelector admits."""
        candidates = [
            n
            for n in self.store.objects(self.nodes)
            if not (n.get("spec") or {}).get("unschedulable")
            and node_selector_matches(pod_spec.get("nodeSelector"), n["metadata"].get("labels") or {})
        ]
        if not candidates:
            return None
        best = min(
            candidates, key=lambda n: (len(self.store.pods_on(n["metadata"]["name"])), n["metadata"]["name"])
        )
        return str(best["metadata"]["name"])

    def finish(self, namespace: str, name: str, uid: str) -> None:
        """The pod's run is over: it succeeds, and its Job counts it (once: after a restore, a pod
        can have two finishes armed)."""
        pod = self.store.find(self.pods, namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or is_terminating(pod) or is_terminal(pod):
            return
        now = rfc3339(self.store.clock.now())

        def succeed(p: Obj) -> None:
            set_ready(p, False, now, "PodCompleted")
            p["status"]["phase"] = "Succeeded"
            for cs in p["status"].get("containerStatuses") or []:
                cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}}
                cs["started"] = False

        self.store.mutate(self.pods, namespace, name, succeed)
        job_uid = self._job_uid(pod)
        job = next(
            (j for j in self.store.objects(self.jobs, namespace) if j["metadata"]["uid"] == job_uid), None
        )
        if job is None:
            return
        completions = int((job.get("spec") or {}).get("completions", 1))

        def count(j: Obj) -> None:
            status = j.setdefault("status", {})
            status["succeeded"] = int(status.get("succeeded", 0)) + 1
            if status["succeeded"] >= completions:
                status["completionTime"] = now
                status["conditions"] = [
                    {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                    {"type": "Complete", "status": "True", "lastTransitionTime": now},
                ]

        updated = self.store.mutate(self.jobs, namespace, job["metadata"]["name"], count)
        if updated is not None:
            self.ensure_pods(updated)

    def _set_active(self, job: Obj) -> None:
        uid = job["metadata"]["uid"]
        active = sum(
            1
            for p in self.store.objects(self.pods, job["metadata"]["namespace"])
            if self._job_uid(p) == uid and not is_terminal(p)
        )
        now = rfc3339(self.store.clock.now())

        def update(j: Obj) -> None:
            status = j.setdefault("status", {})
            status.setdefault("startTime", now)
            status["active"] = active
            if not active:
                status.pop("active")

        self.store.mutate(self.jobs, job["metadata"]["namespace"], job["metadata"]["name"], update)
