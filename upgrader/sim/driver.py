"""The GPU driver's life on a node, as the GPU Operator and GPU Feature Discovery show it.

A driver DaemonSet is one labelled `app.kubernetes.io/component=nvidia-driver`. While its pod on a
node is gone, the node's `nvidia.com/gpu` allocatable is 0 and validators are not Ready; a Ready
driver restores allocatable, relabels the running driver version (as GFD would) and lets
validators turn Ready. A driver stopping while GPU pods still run on the node is an incident.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from upgrader.sim.kubelet import report_ready
from upgrader.sim.podutil import gpu_request, is_ready, is_terminal, is_terminating, node_of
from upgrader.sim.settings import DRIVER_COMPONENT, DRIVER_COMPONENT_LABEL, GPU, VALIDATOR_APP, SimSettings
from upgrader.sim.store import Store

Obj = dict[str, Any]
DRIVER_VERSION_LABELS = (
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
)


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
        # Driver restarts that happened while GPU workloads still ran on the node.
        self.incidents: list[str] = []

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
        self.store.scheduler.after(
            self.settings.delay("validator_ready", node_name, self.settings.validator_ready_delay),
            f"validate {node_name}",
            lambda: self.refresh_validators(node_name),
        )

    def stopping(self, ds: Obj, pod: Obj) -> None:
        """A DaemonSet pod is going; if it is a driver, the node loses its GPUs and validation."""
        if not is_driver_daemonset(ds):
            return
        node_name = node_of(pod)
        busy = [
            p["metadata"]["name"]
            for p in self.store.pods_on(node_name)
            if gpu_request(p) and not is_terminal(p)
        ]
        if busy:
            self.incidents.append(
                f"driver pod {pod['metadata']['name']} stopped on {node_name} while GPU pods ran: "
                + ", ".join(sorted(busy))
            )
        self.store.mutate(self.nodes, None, node_name, _zero_allocatable)
        self.refresh_validators(node_name)

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


def _restore_allocatable(node: Obj) -> None:
    status = node.setdefault("status", {})
    capacity = (status.get("capacity") or {}).get(GPU)
    if capacity is not None:
        status.setdefault("allocatable", {})[GPU] = capacity


def _zero_allocatable(node: Obj) -> None:
    node.setdefault("status", {}).setdefault("allocatable", {})[GPU] = "0"
