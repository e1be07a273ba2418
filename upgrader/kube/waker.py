"""Wake the reconcile loop on changes: watches on nodes and driver pods set an Event.

The watches only say "something changed"; the pass re-reads everything it needs, so a lost
event costs at most one requeue interval.
"""

from __future__ import annotations

import logging
import threading

from upgrader.kube.api import ApiError, KubeApi

log = logging.getLogger("upgrader")


class Waker:
    def __init__(
        self,
        api: KubeApi,
        paths: list[tuple[str, str | None]],
        wake: threading.Event,
        stop: threading.Event,
        timeout_seconds: int = 60,
    ) -> None:
        self.api = api
        self.paths = paths  # (collection path, label selector)
        self.wake = wake
        self.stop = stop
        self.timeout_seconds = timeout_seconds
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for path, selector in self.paths:
            thread = threading.Thread(
                target=self._loop, args=(path, selector), daemon=True, name=f"watch {path}"
            )
            thread.start()
            self.threads.append(thread)

    def _loop(self, path: str, selector: str | None) -> None:
        while not self.stop.is_set():
            try:
                current = self.api.request("list", "GET", path, {"limit": 1, "labelSelector": selector})
                version = str((current.get("metadata") or {}).get("resourceVersion", ""))
                for event in self.api.watch(path, version, self.timeout_seconds, selector):
                    if event.get("type") != "BOOKMARK":
                        self.wake.set()
                    if self.stop.is_set():
                        return
            except (ApiError, OSError, ValueError) as exc:
                log.debug("watch %s ended: %s", path, exc)
            except Exception as exc:  # a watch thread must never die silently
                log.warning("watch %s failed: %s", path, exc)
            self.stop.wait(1.0)
