"""Watch streams: the store's recent changes, replayed and fanned out to per-request queues."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from upgrader.core.model.selectors import FieldRequirement, LabelSelector
from upgrader.sim.apiserver import errors


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
        # Started from a resourceVersion the store has not reached (kube-apiserver's watch cache
        # holds such a watch): changes up to it are skipped, not sent.
        self.after = 0
        # How a stored object is shown to this watch (another API group's view of it, such as
        # events.k8s.io/v1 of a core Event); applied as events are read, so ones queued before it
        # was set are shown that way too.
        self.view: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and all(f.matches(obj) for f in self.fields)

    def offer(self, change: Change) -> None:
        """Translate a change into what this watcher sees: a label change can add or remove."""
        if change.key != self.key or change.rv <= self.after:
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
            return self._shown(self._queue.popleft()) if self._queue else None

    def drain(self) -> list[tuple[str, dict[str, Any]]]:
        """Everything queued so far, without waiting (for in-process use on a virtual clock)."""
        with self._cond:
            items = [self._shown(item) for item in self._queue]
            self._queue.clear()
            return items

    def _shown(self, item: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        event, obj = item
        if self.view is None or event == "ERROR":  # an ERROR carries a Status, not a stored object
            return item
        return event, self.view(obj)

    def close(self, discard: bool = False) -> None:
        """End the stream; `discard` drops what is queued, as a server going away loses it."""
        with self._cond:
            self.closed = True
            if discard:
                self._queue.clear()
            self._cond.notify_all()


# What a watch from a resourceVersion newer than the store's gets (after a restore from an older
# backup): "wait" is kube-apiserver's watch cache (held silently, changes after that version only);
# "gone" a 410 Expired; "too-large" the 504 "Too large resource version" its lists answer.
FUTURE_WATCHES = ("wait", "gone", "too-large")


class ChangeFeed:
    """The store's recent history and its open watchers; the store's lock guards both."""

    def __init__(self, limit: int) -> None:
        self._history: deque[Change] = deque(maxlen=limit)
        self._watchers: list[Watcher] = []
        self._floor = 0  # no watch resumes from before this (set by a restart)
        self.future = "wait"

    def publish(self, change: Change) -> None:
        """Keep a committed change and offer it to every open watcher."""
        self._history.append(change)
        for watcher in self._watchers:
            watcher.offer(change)

    def replay(self, watcher: Watcher, since: int, current_rv: int) -> None:
        """Offer a watcher every kept change after `since`; 410 Expired once history has moved past it.
        A `since` newer than the store is answered as `future` says."""
        oldest = self._history[0].rv if self._history else current_rv + 1
        floor = oldest - 1 if len(self._history) == self._history.maxlen else self._floor
        if since < floor:
            raise errors.expired(since, floor)
        if since > current_rv:
            if self.future == "gone":
                raise errors.expired(since, current_rv)
            if self.future == "too-large":
                raise errors.too_large_resource_version(since, current_rv)
            watcher.after = since
            return
        for change in self._history:
            if change.rv > since:
                watcher.offer(change)

    def subscribe(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    def unsubscribe(self, watcher: Watcher) -> None:
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def restart(self, floor: int, future: str | None = None) -> None:
        """An API server restarted on other data: every open watch ends, unsent events lost, and
        its watch cache starts empty at `floor`, so a watch from before it is 410 Expired."""
        if future is not None and future not in FUTURE_WATCHES:
            raise ValueError(f"future watches get one of {FUTURE_WATCHES}, not {future!r}")
        self.future = future or self.future
        for watcher in self._watchers:
            watcher.close(discard=True)
        self._watchers.clear()
        self._history.clear()
        self._floor = floor


def parse_resource_version(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise errors.bad_request(f"invalid resource version {text!r}") from exc


def _with_resource_version(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    return {**obj, "metadata": {**(obj.get("metadata") or {}), "resourceVersion": str(rv)}}
