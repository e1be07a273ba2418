"""No driver restart under a GPU user, whatever path the user took to the node
(docs/policy.md#the-restarts-admission-guard), as a property on the virtual clock: the real controller
runs against the emulator with API latency injected (every request takes its time while the cluster's
controllers go on), and a GPU pod reaches the node being upgraded at a drawn moment of its upgrade by a
drawn path: pinned by `nodeName` (a Job recreating its pod does this), a DaemonSet's (a GPU client
created mid-rollout), bound by the scheduler (a ReplicaSet pod that tolerates the cordon) or a static
pod's mirror. The emulator's driver records every stop of a driver pod while a pod holding GPUs runs on
its node; there is none, and the node either finishes or blocks naming the pod."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import BLOCKED_REASON, STATE_LABEL, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.admission import REJECTED
from upgrader.sim.controllers.settings import GPU
from upgrader.sim.fleets.scenarios import build

from ..kube.latency import SlowApi

NODE = "gpu-a-01"  # the canary domain's first node: the first to be upgraded
POLICY: dict[str, Any] = {"maxParallelUpgrades": 1, "maxUnavailable": 1, "failureDomains": {"canary": "us-east-1a"}}
PATHS = ("nodeName", "daemonset", "scheduler", "static")
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}


def gpu_spec(**extra: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "resources": {"limits": {GPU: "1"}}}
    return {"terminationGracePeriodSeconds": 1, "containers": [container], **extra}


def arrive(cluster: EmulatedCluster, path: str) -> str:
    """A GPU user reaches NODE by `path`; the name of the pod (or, for a DaemonSet, its prefix)."""
    meta = {"labels": {"app": "late-gpu-user"}}
    if path == "nodeName":
        cluster.create("pods", {"metadata": {"name": "pinned", **meta}, "spec": gpu_spec(nodeName=NODE)}, "default")
        return "pinned"
    if path == "static":
        mirror = {"name": f"static-{NODE}", "annotations": {"kubernetes.io/config.mirror": "x"}, **meta,
                  "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid"}]}
        cluster.create("pods", {"metadata": mirror, "spec": gpu_spec(nodeName=NODE)}, "default")
        return f"static-{NODE}"
    if path == "daemonset":
        template = {"metadata": meta, "spec": gpu_spec(nodeSelector={"kubernetes.io/hostname": NODE},
                                                       tolerations=[UNSCHEDULABLE])}
        ds = {"metadata": {"name": "gpu-client"}, "spec": {"selector": {"matchLabels": meta["labels"]},
                                                            "template": template}}
        cluster.create("daemonsets", ds, "default", "apps")
        return "gpu-client-"
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "serve", "uid": "rs-serve", "controller": True}]
    spec = gpu_spec(nodeSelector={"kubernetes.io/hostname": NODE}, tolerations=[UNSCHEDULABLE])
    cluster.create("pods", {"metadata": {"name": "serve-x", "ownerReferences": owner, **meta}, "spec": spec},
                   "default")
    return "serve-"


def node(cluster: EmulatedCluster) -> dict[str, Any]:
    return cluster.get("nodes", NODE) or {}


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from(PATHS),
    after=st.floats(0.0, 12.0),
    latency=st.sampled_from([(0.0, 0.0), (0.05, 0.3), (0.2, 1.0)]),
    seed=st.integers(0, 2**16),
)
def test_no_driver_restarts_under_a_gpu_user_whatever_its_path(
    path: str, after: float, latency: tuple[float, float], seed: int
) -> None:
    cluster = EmulatedCluster.virtual(seed=seed)
    build(cluster, "healthy", job_seconds=1000.0)
    api = SlowApi(cluster, *latency, seed=seed).api()
    controller = Controller(api, policy_from_mapping(POLICY), Settings(identity="guard"), cluster.store.clock.now)
    name, arrived_in, armed = "", "", False

    def name_of(found: str) -> None:
        nonlocal name, arrived_in
        name, arrived_in = found, node(cluster)["metadata"]["labels"].get(STATE_LABEL, "")

    try:
        for _ in range(400):
            controller.reconcile()
            state = node(cluster)["metadata"]["labels"].get(STATE_LABEL)
            if not armed and state == State.POD_DELETION_REQUIRED.value:
                armed = True  # from the moment its GPU pods go, through the restart
                cluster.store.timers.after(after, "a late GPU user", lambda: name_of(arrive(cluster, path)))
            if state == State.DONE.value or node(cluster)["metadata"].get("annotations", {}).get(BLOCKED_REASON):
                break
            cluster.advance(1)
        assert armed, "the node never reached pod-deletion-required"
        cluster.advance(after + 2)  # the GPU user comes all the same, if it had not yet
        assert name, "the GPU user never came"
        assert cluster.daemonsets.incidents == []
        state = node(cluster)["metadata"]["labels"].get(STATE_LABEL)
        blocked = node(cluster)["metadata"].get("annotations", {}).get(BLOCKED_REASON)
        assert state == State.DONE.value or blocked, (state, blocked)
        # Still on the node and running: it came once the new driver was up, or the block names it (or its owner).
        late = {State.VALIDATION_REQUIRED.value, State.UNCORDON_REQUIRED.value, State.DONE.value}
        for pod in cluster.store.pods_on(NODE):
            if pod["metadata"]["name"].startswith(name) and (pod.get("status") or {}).get("reason") != REJECTED:
                assert arrived_in in late or name.rstrip("-") in str(blocked), (arrived_in, pod["status"], blocked)
    finally:
        cluster.stop()


def test_a_daemonsets_gpu_client_blocks_the_restart_until_deleted_and_comes_back_refused() -> None:
    """A GPU client DaemonSet on the node (running before the rollout): the guard goes up before the
    GPU users are judged, so once its pod is deleted (runbooks/gpu-pods-still-running.md) the pod the
    DaemonSet makes again is refused by the kubelet, and the restart goes on; never run under."""
    cluster = EmulatedCluster.virtual(seed=7)
    build(cluster, "healthy", job_seconds=1.0)
    prefix = arrive(cluster, "daemonset")
    controller = Controller(KubeApi(cluster.client(), sleep=lambda _: None), policy_from_mapping(POLICY),
                            Settings(identity="guard"),
                            cluster.store.clock.now)
    deleted = 0
    try:
        for _ in range(600):
            controller.reconcile()
            annotations = node(cluster)["metadata"].get("annotations", {})
            if node(cluster)["metadata"]["labels"].get(STATE_LABEL) == State.DONE.value:
                break
            if prefix in annotations.get(BLOCKED_REASON, "") and deleted < 5:  # its owner deletes it
                for pod in cluster.store.pods_on(NODE):
                    if pod["metadata"]["name"].startswith(prefix) and not pod["metadata"].get("deletionTimestamp"):
                        cluster.store.delete(cluster.type("pods"), "default", pod["metadata"]["name"])
                        deleted += 1
                cluster.advance(5)  # a slow pass: the DaemonSet makes its pod again before the next look
            cluster.advance(1)
        assert node(cluster)["metadata"]["labels"].get(STATE_LABEL) == State.DONE.value
        assert cluster.daemonsets.incidents == []
        assert deleted == 1, "deleted once: the pod made again was refused, not run"
        refused = [p for p in cluster.store.pods_on(NODE) if p["metadata"]["name"].startswith(prefix)
                   and (p.get("status") or {}).get("reason") == REJECTED]
        assert refused, "the DaemonSet's pod made during the restart was refused by the kubelet"
    finally:
        cluster.stop()
