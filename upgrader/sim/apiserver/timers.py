"""Timers for delayed emulator behaviour (pod termination, driver restarts, job completion).

Time-driven behaviour is scheduled here rather than slept on, so a virtual clock can step
through it deterministically and a real clock can run it from one background thread.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from upgrader.sim.apiserver.clock import Clock


@dataclass(order=True)
class Timer:
    due: float
    seq: int
    name: str = field(compare=False)
    action: Callable[[], None] = field(compare=False, repr=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    """A heap of timers; not thread-safe by itself (the store's lock guards it)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[Timer] = []
        self._seq = itertools.count()
        self.on_schedule: Callable[[], None] | None = None

    def after(self, delay: float, name: str, action: Callable[[], None]) -> Timer:
        timer = Timer(self.clock.now() + max(0.0, delay), next(self._seq), name, action)
        heapq.heappush(self._heap, timer)
        if self.on_schedule is not None:
            self.on_schedule()
        return timer

    def next_due(self) -> float | None:
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0].due if self._heap else None

    def pop_due(self, now: float) -> Timer | None:
        due = self.next_due()
        if due is None or due > now:
            return None
        return heapq.heappop(self._heap)

    def run_due(self) -> int:
        """Run every timer that is due at the clock's current time; returns how many ran."""
        ran = 0
        while (timer := self.pop_due(self.clock.now())) is not None:
            timer.action()
            ran += 1
        return ran

    def advance(self, seconds: float, set_time: Callable[[float], None]) -> None:
        """Move a virtual clock (via `set_time`) forward, firing timers at their own due times on the way."""
        target = self.clock.now() + seconds
        while True:
            due = self.next_due()
            if due is None or due > target:
                break
            set_time(max(due, self.clock.now()))
            self.run_due()
        set_time(target)

    def pending(self) -> list[Timer]:
        return sorted(t for t in self._heap if not t.cancelled)
