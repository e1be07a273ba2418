"""The API server's clock, as this process reads it from the `Date` header of the server's answers.

Every time upgrader writes for another process to judge (a node's `state-since` and the other stamps
of its waits, the Lease's `renewTime`, the status's times) and every wait it judges runs on this
clock, so replicas and CLIs whose own clocks disagree by minutes still time each wait on one clock:
the API server's (docs/operations.md#which-clock-each-timer-runs-on). kube-apiserver, like every Go
HTTP server, dates each answer in whole seconds: an answer dated `d`, asked at local time `sent` and
read at `received`, says the offset (server minus local) lies in [d - received, d + 1 - sent]. The
estimate is the middle of what the recent answers agree on; when they stop agreeing (a clock was
stepped) it starts again from the newest one. Before any answer the offset is 0: the local clock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from email.utils import parsedate_to_datetime

from upgrader.kube.per_client import PerClient

RECENT = 32  # answers whose bounds are intersected


class ServerClock:
    """`now()`: the local clock corrected by the offset the API server's answers show."""

    def __init__(self, local: Callable[[], float] = time.time) -> None:
        self.local = local
        self.offset = 0.0
        self.answers = 0
        self._bounds: deque[tuple[float, float]] = deque(maxlen=RECENT)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self.local() + self.offset

    def observe(self, date: str | None, sent: float, received: float) -> None:
        """One answer's `Date` header (absent or unreadable: nothing learnt), with the local times the
        request went out and the answer came back."""
        server = _http_date(date)
        if server is None:
            return
        bound = (server - received, server + 1.0 - sent)
        with self._lock:
            self._bounds.append(bound)
            low, high = max(b[0] for b in self._bounds), min(b[1] for b in self._bounds)
            if low > high:  # the answers disagree: a clock was stepped; start again from this one
                self._bounds.clear()
                self._bounds.append(bound)
                low, high = bound
            self.offset = (low + high) / 2
            self.answers += 1


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


# The one ServerClock of an ApiClient's API server, shared by every KubeApi built on it.
server_clock_of = PerClient(lambda api_client: ServerClock()).of
