"""The kubelet's admission of a pod that needs GPUs, whatever way it reached the node.

A pod bound to a node (created with `nodeName`, as a Job's or a DaemonSet's pod is; bound by the scheduler;
or a static pod's mirror) that requests GPU or MIG resources is admitted by the node's kubelet only while
the NVIDIA device plugin serves them there: the device manager allocates devices through the plugin, and
with none registered it rejects the pod, which fails at once (phase Failed, reason UnexpectedAdmissionError)
and never runs. That is what the GPU Operator's operand labels rely on when k8s-driver-manager pauses
`nvidia.com/gpu.deploy.device-plugin` before the driver unloads (docs/emulator.md).

Only nodes that carry the device plugin's deploy label (any value) are modelled so; on the others a GPU pod
is admitted as before (fleets built without the device plugin).
"""

from __future__ import annotations

from typing import Any

from upgrader.sim.apiserver.clock import rfc3339
from upgrader.sim.apiserver.podutil import gpu_request, gpu_requests, is_terminal, is_terminating, node_of
from upgrader.sim.apiserver.store import Store
from upgrader.sim.apiserver.watch import Change

Obj = dict[str, Any]
DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
DEVICE_PLUGIN_APP = "nvidia-device-plugin-daemonset"
REJECTED = "UnexpectedAdmissionError"
MESSAGE = (
    "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
    "{resource}, which is unexpected"
)


class GpuAdmission:
    """Rejects a GPU pod bound to a node whose device plugin is not running there."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pods = store.type("", "v1", "pods")
        self.nodes = store.type("", "v1", "nodes")
        self.rejected: list[str] = []  # "<ns>/<pod> on <node>", in order

    def react(self, change: Change) -> None:
        """A pod created bound and not yet running (a pod the API creates is Pending: a kubectl or static
        pod, a DaemonSet's), or bound by the scheduler now; the Job controller's pods, born running here,
        are judged before they are created (`admit`). Loaded pods were admitted in the cluster they come from."""
        if change.key != self.pods.key or change.type == "DELETED":
            return
        pod, old = change.new, change.old
        node = node_of(pod)
        if not node or is_terminal(pod) or not gpu_request(pod):
            return
        arriving = (old is None and (pod.get("status") or {}).get("phase") != "Running") or (
            old is not None and node_of(old) != node)
        if arriving and not self.served(node):
            meta = pod["metadata"]
            now = rfc3339(self.store.clock.now())
            self.store.mutate(self.pods, meta.get("namespace"), meta["name"], lambda p: self.admit(p, now))

    def admit(self, pod: Obj, now: str) -> None:
        """Reject `pod` (in place) when its node's device plugin is not there to allocate its GPUs."""
        node = node_of(pod)
        if not node or not gpu_request(pod) or self.served(node):
            return
        self.rejected.append(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']} on {node}")
        _reject(pod, next(iter(sorted(gpu_requests(pod))), "nvidia.com/gpu"), now)

    def served(self, node_name: str) -> bool:
        node = self.store.find(self.nodes, None, node_name)
        if node is None or DEVICE_PLUGIN_LABEL not in ((node["metadata"].get("labels")) or {}):
            return True  # not a node whose GPUs the emulator serves through a device plugin
        return any(
            (p["metadata"].get("labels") or {}).get("app") == DEVICE_PLUGIN_APP
            and (p.get("status") or {}).get("phase") == "Running"
            and not is_terminating(p)
            for p in self.store.pods_on(node_name)
        )


def _reject(pod: Obj, resource: str, now: str) -> None:
    status = pod.setdefault("status", {})
    status["phase"] = "Failed"
    status["reason"] = REJECTED
    status["message"] = MESSAGE.format(resource=resource)
    status["conditions"] = [{"type": "Ready", "status": "False", "lastTransitionTime": now}]
    status["containerStatuses"] = [
        {**cs, "ready": False, "started": False, "state": {"terminated": {"exitCode": 0, "reason": REJECTED}}}
        for cs in status.get("containerStatuses") or []
    ]
