"""Sends the pass's notices (core/policy/notices.py) to the policy's webhooks, off the pass: the pass puts
them on a queue and goes on; one thread POSTs each, retried with tenacity (exponential, 5 tries,
at most about a minute), and says in the log what could not be sent. A queue that is full (a
receiver away for long) drops the newest, said once. Nothing here ever blocks or fails a pass."""

from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenacity import Retrying, stop_after_attempt, wait_exponential

from upgrader.core.policy.notices import Notice, Webhook
from upgrader.core.report.document import RolloutStatus

log = logging.getLogger("upgrader.notify")
QUEUED = 1000  # notices waiting to be sent, at most
TRIES = 5
TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Delivery:
    url: str
    body: dict[str, Any]
    kind: str


class Notifier:
    """`tell(notices, status)` from the pass; a daemon thread sends. `sent` and `failed` count."""

    def __init__(self, rollout: str, wait: Any = None) -> None:
        self.rollout = rollout
        self.queue: queue.Queue[Delivery | None] = queue.Queue(QUEUED)
        self.wait = wait if wait is not None else wait_exponential(multiplier=1, max=30)
        self.sent = self.failed = self.dropped = 0
        self.thread = threading.Thread(target=self._run, name="notifier", daemon=True)
        self.thread.start()

    def tell(self, webhooks: Sequence[Webhook], notices: Sequence[Notice], status: RolloutStatus) -> None:
        for notice in notices:
            for hook in webhooks:
                if notice.kind not in hook.events:
                    continue
                url = _url_of(hook)
                if url is None:
                    continue
                try:
                    self.queue.put_nowait(Delivery(url, notice.body(self.rollout, status, hook.format), notice.kind))
                except queue.Full:
                    if not self.dropped:
                        log.warning("notifications queue full (%d): dropping notices until it drains", QUEUED)
                    self.dropped += 1

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (within `timeout`), then stop the thread."""
        self.queue.put(None)
        self.thread.join(timeout)

    def _run(self) -> None:
        while (delivery := self.queue.get()) is not None:
            try:
                Retrying(stop=stop_after_attempt(TRIES), wait=self.wait, reraise=True)(_post, delivery)
                self.sent += 1
            except Exception as exc:  # a receiver's failure must never reach the loop
                self.failed += 1
                log.warning("notice %s not sent to %s after %d tries: %s", delivery.kind, _shown(delivery.url),
                            TRIES, exc)


def _post(delivery: Delivery) -> None:
    request = urllib.request.Request(
        delivery.url, json.dumps(delivery.body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:  # the policy's URL
        answer.read()


def _url_of(hook: Webhook) -> str | None:
    if hook.url is not None:
        return hook.url
    try:
        return Path(hook.url_file or "").read_text().strip() or None
    except OSError as exc:
        log.warning("notifications: cannot read urlFile %s: %s", hook.url_file, exc.strerror)
        return None


def _shown(url: str) -> str:
    """The receiver without its path: a Slack webhook's path is its secret."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"
