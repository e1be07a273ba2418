"""Whether the API server answers, said once per change; and the capped, jittered backoff that paces
the retries meanwhile.

Each part of the controller that talks to the API server on its own schedule (the reconcile loop,
each watch) reports what came of its last try: `failed` with an error that means the API server is
away (no answer, or a refusal: 401, 403, 429, 5xx; see `ApiError.away`), or `answered`. The log says
it in one line when the API server goes away, one when the trouble changes (unreachable -> answering
403), and one when every reporter has had an answer again; never once per retry. Each reporter keeps
its own condition, so a watch that is refused while passes go through does not make the line flap.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from upgrader.kube.per_client import PerClient


class Away(Protocol):
    """An error that means the API server is away (api.py's ApiError with `away` true)."""

    @property
    def kind(self) -> str: ...


log = logging.getLogger("upgrader")

BACKOFF_CAP_SECONDS = 30.0  # the longest wait between tries while the API server is away
JITTER = 0.5  # a wait is drawn from [ceiling * (1 - JITTER), ceiling]


class Backoff:
    """Exponential from `base`, capped, with jitter: the n-th failure in a row waits between half and
    all of min(cap, base * 2^(n-1)); a success starts over."""

    def __init__(self, base: float, cap: float = BACKOFF_CAP_SECONDS, rng: random.Random | None = None) -> None:
        self.base = min(base, cap)
        self.cap = cap
        self.rng = rng or random.Random()
        self.failures = 0

    def ceiling(self, failures: int) -> float:
        """The longest wait after `failures` failures in a row."""
        return float(min(self.cap, self.base * 2 ** max(failures - 1, 0)))

    def next(self) -> float:
        """One more failure: how long to wait before the next try."""
        self.failures += 1
        return self.ceiling(self.failures) * (1 - JITTER * self.rng.random())

    def reset(self) -> None:
        self.failures = 0


@dataclass(frozen=True)
class Trouble:
    kind: str  # "unreachable", or the HTTP status the API server refused with
    line: str  # the error's one line, naming the API server
    since: float


class Reachability:
    """One per API server client: what the log last said about it, and what each reporter last saw."""

    def __init__(self, server: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.server = server
        self.clock = clock
        self._lock = threading.Lock()
        self._reporters: dict[str, Trouble] = {}
        self._said: Trouble | None = None  # the trouble the log last announced; None: answering

    def failed(self, reporter: str, error: Away) -> None:
        """`reporter`'s last try met `error` (one that means the API server is away)."""
        kind = error.kind
        with self._lock:
            known = self._reporters.get(reporter)
            if known is not None and known.kind == kind:
                return  # nothing new from this reporter
            now = self.clock()
            self._reporters[reporter] = Trouble(kind, str(error), now)
            if self._said is None or self._said.kind != kind:
                self._announce(Trouble(kind, str(error), self._said.since if self._said else now))

    def answered(self, reporter: str) -> None:
        """`reporter`'s last try got an answer that does not mean the API server is away. The API
        server is back once every reporter in trouble has had one; until then what the others last
        saw is older than this answer, so it is not said again."""
        with self._lock:
            if self._reporters.pop(reporter, None) is None or self._said is None or self._reporters:
                return
            log.info("API server %s reachable again after %.0f s", self.server, self.clock() - self._said.since)
            self._said = None

    def condition(self) -> str | None:
        """Why the API server is away and for how long (for /readyz); None while it answers."""
        with self._lock:
            said = self._said
            return None if said is None else f"{said.line} (for {self.clock() - said.since:.0f} s)"

    def _announce(self, trouble: Trouble) -> None:
        self._said = trouble
        log.warning("%s; retrying with backoff (up to %g s)", trouble.line, BACKOFF_CAP_SECONDS)


# The one Reachability of an ApiClient's API server, shared by every KubeApi built on it.
reachability_of = PerClient(lambda api_client: Reachability(str(api_client.configuration.host))).of
