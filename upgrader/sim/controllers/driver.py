"""The GPU driver's life on a node, as the GPU Operator and GPU Feature Discovery show it.

A driver DaemonSet is one labelled `app.kubernetes.io/component=nvidia-driver`. While its pod on a
node is gone, the node's GPU allocatable (`nvidia.com/gpu` and MIG slices `nvidia.com/mig-*`) is 0
and validators are not Ready; a Ready driver restores allocatable, relabels the running driver
version (as GFD would) and lets validators turn Ready. A driver stopping while pods still hold GPUs
on the node (GPU or MIG resources, or a DRA claim NVIDIA's driver allocated) is an incident.

Safe driver loading (k8s-operator-libs' two-step load): a driver template with an init container
whose env has SAFE_LOAD_ENV=true keeps the old module loaded when its old pod stops; the new pod's
init container sets SAFE_LOAD_ANNOTATION on the node and blocks until an upgrade controller removes
it; only then does the driver unload the old module and load the new one (an incident if GPU pods
still run then).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from upgrader.core.model.gpupods import claim_allocated_gpu, is_gpu_resource
from upgrader.core.model.views import DIGEST_ENV, config_digest
from upgrader.sim.apiserver.podutil import (
    CLAIMS,
    claim_names,
    gpu_request,
    is_ready,
    is_terminal,
    is_terminating,
    node_of,
)
from upgrader.sim.apiserver.store import Store
from upgrader.sim.controllers.kubelet import report_ready
from upgrader.sim.controllers.settings import DRIVER_COMPONENT, DRIVER_COMPONENT_LABEL, GPU, VALIDATOR_APP, SimSettings

Obj = dict[str, Any]
# The Operator libraries' names for safe driver loading (the emulator's own copy: it judges upgrader).
SAFE_LOAD_ANNOTATION = "nvidia.com/gpu-driver-upgrade.driver-wait-for-safe-load"
SAFE_LOAD_ENV = "ENABLE_SAFE_DRIVER_LOAD"
# How an incident names a driver restart Kubernetes made itself (the DaemonSet's RollingUpdate).
ROLLED_BY_KUBERNETES = "deleted by the DaemonSet controller's RollingUpdate"
DRIVER_VERSION_LABELS = (
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
)


def compute_config_digest(template: Obj) -> str:
    """A digest of what installs the driver (images, commands, arguments, env, mounts, volumes), not of
    labels, tolerations or resources: the GPU Operator's DRIVER_CONFIG_DIGEST, in our own encoding
    (only equality between a pod and its DaemonSet's template matters)."""
    spec = template.get("spec") or {}
    parts = {
        "containers": [
            {
                "image": c.get("image"),
                "command": c.get("command"),
                "args": c.get("args"),
                "env": sorted(
                    (str(e.get("name")), str(e.get("value")))
                    for e in c.get("env") or []
                    if e.get("name") != DIGEST_ENV and "value" in e
                ),
                "mounts": sorted(json.dumps(m, sort_keys=True) for m in c.get("volumeMounts") or []),
            }
            for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or []))
        ],
        "volumes": sorted(json.dumps(v, sort_keys=True) for v in spec.get("volumes") or []),
    }
    return str(int(hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:8], 16))


def is_driver_daemonset(ds: Obj) -> bool:
    return (ds["metadata"].get("labels") or {}).get(DRIVER_COMPONENT_LABEL) == DRIVER_COMPONENT


def driver_version(template: Obj) -> str | None:
    """The full driver version a driver template installs (its DRIVER_VERSION env)."""
    for container in (template.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == "DRIVER_VERSION":
                return str(env.get("value"))
    return None


class DriverLifecycle:
    """What a driver pod starting and stopping does to its node and the node's validators."""

    def __init__(self, store: Store, settings: SimSettings, daemonset_of: Callable[[Obj], Obj | None]) -> None:
        self.store = store
        self.settings = settings
        self.daemonset_of = daemonset_of  # the DaemonSet controlling a pod, if it still exists
        self.pods = store.type("", "v1", "pods")
        self.nodes = store.type("", "v1", "nodes")
        self.claims = store.type(*CLAIMS)
        # Driver restarts that happened while GPU workloads still ran on the node.
        self.incidents: list[str] = []
        # Driver pods restarted with their configuration unchanged: the module stayed loaded.
        # Pods the DaemonSet controller deleted itself (RollingUpdate), not a client: named so in incidents.
        self.rolled: set[str] = set()
        # node -> how its driver pod goes on once the safe-load annotation is removed.
        self._safe_waiting: dict[str, Callable[[], None]] = {}
        self.kept_loaded: list[str] = []

    def ready(self, ds: Obj, node_name: str) -> None:
        """A driver pod turned Ready: GPUs and the driver-version labels come back, then validators."""
        version = driver_version((ds.get("spec") or {}).get("template") or {})

        def reload(node: Obj) -> None:
            _restore_allocatable(node)
            parts = (version or "").split(".")
            if len(parts) == 3:
                labels = node["metadata"].setdefault("labels", {})
                labels.update(dict(zip(DRIVER_VERSION_LABELS, parts, strict=True)))

        self.store.mutate(self.nodes, None, node_name, reload)
        self.store.timers.after(
            self.settings.delay("validator_ready", node_name, self.settings.validator_ready_delay),
            f"validate {node_name}",
            lambda: self.refresh_validators(node_name),
        )

    def stopping(self, ds: Obj, pod: Obj) -> None:
        """A DaemonSet pod is going; if it is a driver, the node loses its GPUs and validation.

        Unless the DaemonSet's template carries the pod's own DRIVER_CONFIG_DIGEST: nothing that
        installs the driver changed, so (as the GPU Operator's driver containers do) the module stays
        loaded across the pod's restart and GPU pods keep running.
        """
        if not is_driver_daemonset(ds):
            return
        node_name = node_of(pod)
        if safe_load(((ds.get("spec") or {}).get("template") or {}).get("spec")):
            self.kept_loaded.append(f"{node_name}: driver pod {pod['metadata']['name']} (its successor loads safely)")
            return
        digest = config_digest(pod.get("spec"))
        if digest is not None and digest == config_digest(((ds.get("spec") or {}).get("template") or {}).get("spec")):
            self.kept_loaded.append(f"{node_name}: driver pod {pod['metadata']['name']}")
            return
        busy = [p["metadata"]["name"] for p in self.store.pods_on(node_name) if self.holds_gpu(p)]
        if busy:
            by = f" ({ROLLED_BY_KUBERNETES})" if pod["metadata"]["name"] in self.rolled else ""
            self.incidents.append(
                f"driver pod {pod['metadata']['name']} stopped on {node_name}{by} while GPU pods ran: "
                + ", ".join(sorted(busy))
            )
        self.store.mutate(self.nodes, None, node_name, _zero_allocatable)
        self.refresh_validators(node_name)

    # ----- safe driver loading ------------------------------------------------------------------

    def hold_for_safe_load(self, pod: Obj, proceed: Callable[[], None]) -> bool:
        """A starting driver pod whose init container waits for a safe load: annotate the node and hold
        `proceed` until the annotation is removed. False for any other pod."""
        if not safe_load(pod.get("spec")) or not self._is_driver_pod(pod):
            return False
        node_name = node_of(pod)
        self._safe_waiting[node_name] = lambda: self._load(node_name, proceed)

        def wait(node: Obj) -> None:
            node["metadata"].setdefault("annotations", {})[SAFE_LOAD_ANNOTATION] = "true"

        self.store.mutate(self.nodes, None, node_name, wait)
        return True

    def node_changed(self, node: Obj) -> None:
        """The safe-load annotation removed from a node whose driver pod waits: it loads now."""
        name = node["metadata"]["name"]
        if name in self._safe_waiting and not (node["metadata"].get("annotations") or {}).get(SAFE_LOAD_ANNOTATION):
            self.store.timers.after(0.0, f"safe load on {name}", self._safe_waiting.pop(name))

    def _load(self, node_name: str, proceed: Callable[[], None]) -> None:
        """The old module unloads now and the new one loads."""
        busy = [p["metadata"]["name"] for p in self.store.pods_on(node_name) if self.holds_gpu(p)]
        if busy:
            self.incidents.append(f"driver loaded on {node_name} while GPU pods ran: " + ", ".join(sorted(busy)))
        self.store.mutate(self.nodes, None, node_name, _zero_allocatable)
        proceed()

    def holds_gpu(self, pod: Obj) -> bool:
        """A live pod with GPU or MIG resources, or a ResourceClaim of NVIDIA's DRA driver (a claim
        that is gone counts: it may have been deleted under a running pod)."""
        if is_terminal(pod):
            return False
        if gpu_request(pod):
            return True
        ns = pod["metadata"]["namespace"]
        for name in claim_names(pod):
            claim = self.store.find(self.claims, ns, name)
            if claim is None or claim_allocated_gpu(claim):
                return True
        return False

    def refresh_validators(self, node_name: str) -> None:
        """Validators are Ready exactly when the node's driver pod is Ready and the node is sound."""
        driver_ok = any(
            is_ready(p) and not is_terminating(p) for p in self.store.pods_on(node_name) if self._is_driver_pod(p)
        )
        healthy = driver_ok and node_name not in self.settings.broken_validation_nodes
        if healthy:
            self.store.mutate(self.nodes, None, node_name, _restore_allocatable)
        for pod in self.store.pods_on(node_name):
            if (pod["metadata"].get("labels") or {}).get("app") != VALIDATOR_APP or is_terminating(pod):
                continue
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            reason = None if healthy else "DriverNotReady" if not driver_ok else "ValidationFailed"
            report_ready(self.store, self.pods, pod, healthy, reason)
        if driver_ok and not healthy:
            self.store.mutate(self.nodes, None, node_name, _zero_allocatable)

    def _is_driver_pod(self, pod: Obj) -> bool:
        ds = self.daemonset_of(pod)
        return ds is not None and is_driver_daemonset(ds)


def safe_load(pod_spec: Obj | None) -> bool:
    """The pod (or template) loads its driver safely: an init container with SAFE_LOAD_ENV=true."""
    return any(
        e.get("name") == SAFE_LOAD_ENV and str(e.get("value")).lower() == "true"
        for c in (pod_spec or {}).get("initContainers") or []
        for e in c.get("env") or []
    )


def _restore_allocatable(node: Obj) -> None:
    status = node.setdefault("status", {})
    allocatable = status.setdefault("allocatable", {})
    for resource, amount in (status.get("capacity") or {}).items():
        if is_gpu_resource(resource):
            allocatable[resource] = amount


def _zero_allocatable(node: Obj) -> None:
    status = node.setdefault("status", {})
    allocatable = status.setdefault("allocatable", {})
    for resource in {GPU, *(status.get("capacity") or {}), *allocatable}:
        if is_gpu_resource(resource):
            allocatable[resource] = "0"
