"""Clocks for the emulator: wall time for serving, virtual time for deterministic tests."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

from upgrader.core.model.timefmt import parse_rfc3339, rfc3339, rfc3339_micro

__all__ = ["VIRTUAL_EPOCH", "Clock", "RealClock", "VirtualClock", "parse_rfc3339", "rfc3339", "rfc3339_micro"]

# Virtual clocks start here so timestamps in tests are stable and readable.
VIRTUAL_EPOCH = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


class Clock(Protocol):
    """Seconds since the Unix epoch, as a float."""

    def now(self) -> float: ...


class RealClock:
    """Wall-clock time."""

    virtual = False

    def now(self) -> float:
        return time.time()


class VirtualClock:
    """Time that only moves when told to; the store's timers drive it forward."""

    virtual = True

    def __init__(self, start: float = VIRTUAL_EPOCH) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError("a virtual clock never goes backwards")
        self._now = t
