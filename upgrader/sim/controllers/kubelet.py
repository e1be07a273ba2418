"""What the kubelet reports about a DaemonSet pod: its containers' states and its readiness."""

from __future__ import annotations

from typing import Any

from upgrader.sim.apiserver.clock import rfc3339
from upgrader.sim.apiserver.podutil import set_ready
from upgrader.sim.apiserver.registry import ResourceType
from upgrader.sim.apiserver.store import Store

Obj = dict[str, Any]


def report_ready(store: Store, pods: ResourceType, pod: Obj, ready: bool, reason: str | None = None) -> None:
    """Set a stored pod's readiness as of the store's clock."""
    now = rfc3339(store.clock.now())
    m = pod["metadata"]
    store.mutate(pods, m["namespace"], m["name"], lambda p: set_ready(p, ready, now, reason))


def container_status(container: Obj, running: bool, now: str) -> Obj:
    state: Obj = {"running": {"startedAt": now}} if running else {"waiting": {"reason": "ContainerCreating"}}
    return {
        "name": container.get("name", ""),
        "image": container.get("image", ""),
        "ready": False,
        "restartCount": 0,
        "started": running,
        "state": state,
    }


def mark_running(pod: Obj, now: str) -> None:
    status = pod.setdefault("status", {})
    status["phase"] = "Running"
    for cs in status.get("containerStatuses") or []:
        cs["state"] = {"running": {"startedAt": now}}
        cs["started"] = True


def mark_image_pull_error(pod: Obj, image: str, now: str) -> None:
    status = pod.setdefault("status", {})
    status["phase"] = "Pending"
    for cs in status.get("containerStatuses") or []:
        if cs.get("image") == image:
            cs["state"] = {
                "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": f'Back-off pulling image "{image}": ErrImagePull: failed to pull and unpack '
                    f'image "{image}": not found',
                }
            }
    set_ready(pod, False, now, "ContainersNotReady")
