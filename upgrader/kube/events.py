"""Node Events, reason `GPUDriverUpgrade`, aggregated as client-go's recorder aggregates them.

An Event repeated with the same type and message on the same node is one object whose `count` and
`lastTimestamp` move on, not a new object per pass. Its name is derived from what it says, so a
restarted controller (or the other replica) finds the object and counts on instead of starting over;
the counts this process knows spare it a read.
"""

from __future__ import annotations

import hashlib
from typing import Any

from upgrader.core.model.actions import Event
from upgrader.core.model.timefmt import rfc3339, rfc3339_micro
from upgrader.kube.addresses import Addresses
from upgrader.kube.api import MERGE, ApiError, KubeApi

Obj = dict[str, Any]
EVENT_REASON = "GPUDriverUpgrade"
COMPONENT = "gpu-driver-upgrader"


def event_name(event: Event) -> str:
    """`<node>.<16 hex digits of type, reason and message>`: the same words, the same object."""
    digest = hashlib.sha256(f"{event.type}\0{EVENT_REASON}\0{event.message}".encode()).hexdigest()[:16]
    return f"{event.node[:200]}.{digest}"


class EventRecorder:
    """Creates an Event the first time, counts it on afterwards. One per controller process."""

    def __init__(self, api: KubeApi, settings: Addresses) -> None:
        self.api = api
        self.settings = settings
        self.counts: dict[str, int] = {}  # event name -> count last written by this process

    def record(self, event: Event, node_uid: str, now: float) -> None:
        name = event_name(event)
        base = f"/api/v1/namespaces/{self.settings.event_namespace}/events"
        known = self.counts.get(name)
        if known is not None and self._count_on(f"{base}/{name}", known, now):
            return
        try:
            self.api.create(base, self._body(event, name, node_uid, now))
            self.counts[name] = 1
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = self.api.get(f"{base}/{name}")  # written before this process knew it
            count = int((current or {}).get("count") or 1)
            if not self._count_on(f"{base}/{name}", count, now):
                self.api.create(base, self._body(event, name, node_uid, now))  # expired meanwhile
                self.counts[name] = 1

    def _count_on(self, path: str, count: int, now: float) -> bool:
        """Count one more occurrence; False when the Event is gone (Events expire, an hour by default)."""
        try:
            self.api.patch(path, {"count": count + 1, "lastTimestamp": rfc3339(now)}, MERGE)
        except ApiError as exc:
            if exc.status != 404:
                raise
            self.counts.pop(path.rsplit("/", 1)[-1], None)
            return False
        self.counts[path.rsplit("/", 1)[-1]] = count + 1
        return True

    def _body(self, event: Event, name: str, node_uid: str, now: float) -> Obj:
        stamp = rfc3339(now)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": self.settings.event_namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": event.node, "uid": node_uid},
            "reason": EVENT_REASON,
            "message": event.message[:1024],
            "type": event.type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.settings.identity,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": rfc3339_micro(now),
            "action": "Upgrade",
            "count": 1,
        }
