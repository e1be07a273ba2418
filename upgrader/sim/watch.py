"""Watch streams: events fan out from the store to per-request queues."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from upgrader.core.selectors import FieldRequirement, LabelSelector


@dataclass(frozen=True)
class Change:
    """One committed write, as kept in the store's history."""

    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    key: tuple[str, str]  # (group, plural)
    old: dict[str, Any] | None
    new: dict[str, Any]


class Watcher:
    """One watch request's view of the change stream, filtered by namespace and selectors."""

    def __init__(
        self,
        key: tuple[str, str],
        namespace: str | None,
        labels: LabelSelector,
        fields: tuple[FieldRequirement, ...],
    ) -> None:
        self.key = key
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self._queue: deque[tuple[str, dict[str, Any]]] = deque()
        self._cond = threading.Condition()
        self.closed = False

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and all(f.matches(obj) for f in self.fields)

    def offer(self, change: Change) -> None:
        """Translate a change into what this watcher sees: a label change can add or remove."""
        if change.key != self.key:
            return
        if change.type == "DELETED":
            if self._matches(change.new):
                self.push("DELETED", change.new)
            return
        was, now = self._matches(change.old), self._matches(change.new)
        if now:
            self.push("MODIFIED" if was else "ADDED", change.new)
        elif was and change.old is not None:
            # Leaving the selection: the API server sends the previous content (which still
            # matched) with the new resourceVersion.
            self.push("DELETED", _with_resource_version(change.old, change.rv))

    def push(self, event: str, obj: dict[str, Any]) -> None:
        with self._cond:
            self._queue.append((event, obj))
            self._cond.notify_all()

    def get(self, timeout: float | None) -> tuple[str, dict[str, Any]] | None:
        """The next event, waiting up to `timeout` seconds; None on timeout or close."""
        with self._cond:
            if not self._queue and not self.closed:
                self._cond.wait(timeout)
            return self._queue.popleft() if self._queue else None

    def drain(self) -> list[tuple[str, dict[str, Any]]]:
        """Everything queued so far, without waiting (for in-process use on a virtual clock)."""
        with self._cond:
            items = list(self._queue)
            self._queue.clear()
            return items

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


def _with_resource_version(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    return {**obj, "metadata": {**(obj.get("metadata") or {}), "resourceVersion": str(rv)}}
