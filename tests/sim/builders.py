"""Object bodies and small readers shared by the emulator tests."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]


def node_body(name: str, labels: dict[str, str] | None = None, gpus: int = 8) -> Obj:
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {},
        "status": {
            "capacity": {"cpu": "16", "nvidia.com/gpu": str(gpus)},
            "allocatable": {"cpu": "16", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_body(
    name: str,
    labels: dict[str, str] | None = None,
    node: str | None = "node-1",
    ready: bool = True,
    phase: str = "Running",
    grace: int = 30,
) -> Obj:
    spec: Obj = {
        "terminationGracePeriodSeconds": grace,
        "containers": [{"name": "main", "image": "registry.example/app:1"}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"},
                {"type": "ContainersReady", "status": "True" if ready else "False"},
            ],
        },
    }


def status_of(exc: ApiException) -> Obj:
    """The Status object an API error carried in its body."""
    body: Obj = json.loads(exc.body)
    return body


def is_ready(pod: k8s.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def rv(obj: Any) -> int:
    return int(obj.metadata.resource_version)


def names(items: list[Any]) -> list[str]:
    return [i.metadata.name for i in items]


def watch_events(func: Any, *args: Any, **kwargs: Any) -> list[tuple[str, Any]]:
    """Everything a watch has queued (in-process a watch drains what is there and ends)."""
    stream = watch.Watch().stream(func, *args, timeout_seconds=1, **kwargs)
    return [(e["type"], e["object"]) for e in stream]
