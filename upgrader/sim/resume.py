"""The cluster resuming from a restored backup, as kubelets and controllers resync (see apiserver/backup.py).

The emulator has no world apart from its store, so the world goes back with it: kubelets and
controllers carry on from the restored objects. Timers still pending act only on objects still in
the state they were set for (same uid, still terminating, not finished); what the restored state
needs and no timer will do any more (a pod starting, terminating, a job pod running out its time)
is armed again by `resume`.
"""

from __future__ import annotations

from upgrader.sim.apiserver.clock import parse_rfc3339
from upgrader.sim.apiserver.podutil import is_ready, is_terminal, is_terminating, node_of, owner
from upgrader.sim.apiserver.registry import BUILTIN_TYPES, crd_types
from upgrader.sim.controllers.jobs import run_seconds
from upgrader.sim.controllers.workloads import replaced_owner
from upgrader.sim.loading import settle
from upgrader.sim.parts import ClusterParts


def resume(cluster: ClusterParts) -> None:
    """Bring the behaviours in line with restored objects, as kubelets and controllers resync."""
    store = cluster.store
    _sync_crds(cluster)
    pods, now = store.type("", "v1", "pods"), store.clock.now()
    jobs = {j["metadata"]["uid"]: j for j in store.objects(cluster.jobs.jobs)}
    for pod in store.objects(pods):
        m, status = pod["metadata"], pod.get("status") or {}
        if is_terminating(pod):  # the grace period ends when the restored deletionTimestamp says
            store.expire_terminating(pods, pod, parse_rfc3339(m["deletionTimestamp"]) - now)
        elif is_terminal(pod) or not node_of(pod):
            continue
        elif owner(pod, "DaemonSet") is not None:
            if not is_ready(pod):
                cluster.daemonsets.start(pod)  # the kubelet starts it again
        elif (ref := owner(pod, "Job")) is not None:
            seconds = run_seconds(jobs[ref["uid"]]) if ref.get("uid") in jobs else None
            if seconds is not None:  # it runs out its time from when it started
                seconds = cluster.settings.delay("job_run", node_of(pod), seconds)
                started = parse_rfc3339(status["startTime"]) if status.get("startTime") else now
                ns, name, uid = m["namespace"], m["name"], m["uid"]
                finish = lambda ns=ns, name=name, uid=uid: cluster.jobs.finish(ns, name, uid)  # noqa: E731
                store.timers.after(started + seconds - now, f"job pod {ns}/{name} finishes", finish)
        elif replaced_owner(pod) is not None and not is_ready(pod):
            cluster.workloads.ready_later(pod)
    settle(cluster, jobs.values())
    for node in store.objects(store.type("", "v1", "nodes")):
        cluster.daemonsets.refresh_validators(node["metadata"]["name"])
    store.timers.after(0, "schedule pending pods", cluster.workloads.schedule_pending)


def _sync_crds(cluster: ClusterParts) -> None:
    """The custom resource types served are the restored CustomResourceDefinitions' again."""
    store = cluster.store
    registry = store.registry
    crds = store.objects(store.type("apiextensions.k8s.io", "v1", "customresourcedefinitions"))
    wanted = {(t.group, t.version, t.plural): t for crd in crds for t in crd_types(crd)}
    builtin = {(t.group, t.version, t.plural) for t in BUILTIN_TYPES}
    for key in [k for k in registry.types if k not in builtin and k not in wanted]:
        registry.remove(*key)
    for crd in crds:
        registry.serve_crd(crd)
