"""Maintenance windows: is one open at `now`, which, when it closes, and when the next one opens.

Pure: `now` is epoch seconds handed in; nothing here reads a clock.

A window is a 5-field cron expression for its start, read in the window's IANA time zone, and a
duration in elapsed time. Starts follow the local wall clock, so "0 2 * * *" in Europe/Berlin opens
at 02:00 local time in winter and in summer. Across a DST change (docs/policy.md says the same):

- a start inside the hour the clocks skip (02:30 on a spring-forward night) is read with the offset
  in force before the jump, which is 03:30 after it: the window opens one hour late on the wall
  clock, and still lasts its whole duration;
- a start inside the hour the clocks repeat (02:30 on a fall-back night) opens the window once, at
  the first 02:30 (summer time); the duration is elapsed time, so a 4h window from 02:00 closes at
  05:00 on the wall clock that night, not 06:00.

Cron starts are listed in local wall time (croniter on naive datetimes, which has no DST quirks) and
only then placed on the time line with `zoneinfo`, so the two rules above are the whole story.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from upgrader.core.model.timefmt import rfc3339
from upgrader.core.report.entries import WindowReport

MAX_DURATION = 7 * 24 * 3600
# Search bounds: croniter gives up after this many years without a start (a schedule that fires on
# Feb 29 fires once in 4 years, or 8 across 2100); `closes_at` looks this far ahead for the end of
# back-to-back windows and says "not within sight" past it.
YEARS = 8
HORIZON = 8 * 24 * 3600
_MERGES = 400
# Local wall time vs elapsed time differ by at most a DST shift (1 h; 30 min on Lord Howe): starts
# are looked for this much either side of `now`'s wall time, then kept by their true instant.
_SLACK = timedelta(hours=2)
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?$")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
FULL_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_START = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


class WindowError(ValueError):
    """A window the policy cannot use; the message is the one-line reason."""


@dataclass(frozen=True)
class Window:
    name: str  # as status and Events name it: the policy's `name`, else "window N"
    cron: str  # 5 fields, local wall time of `zone`
    seconds: int  # duration, elapsed
    zone: str  # IANA name

    def describe(self) -> str:
        return f"{self.name} ({self.cron} {self.zone}, {format_duration(self.seconds)})"


@dataclass(frozen=True)
class Verdict:
    """Whether a node may start now. With no window configured it is always open (`windows` 0)."""

    open: bool
    windows: int  # how many windows the policy has
    window: str | None = None  # the open one (the one open longest ahead), or the next to open
    closes_at: float | None = None  # open: the end of the open stretch; None when not within HORIZON
    next_open: float | None = None  # closed: the next opening; None when none within YEARS
    about: str | None = None  # `window`, described: "nightly (0 22 * * * Europe/Berlin, 4h)"
    zone: str | None = None  # `window`'s time zone

    def local(self, t: float) -> str:
        """`t` in `window`'s zone, as an operator there reads it."""
        return local_text(t, self.zone or "UTC")

    def report(self) -> WindowReport:
        """The status's `maintenance_window`; the same from pass to pass while nothing opens or closes."""
        return WindowReport(self.open, self.window, self.about, _stamp(self.closes_at), _stamp(self.next_open))


ALWAYS_OPEN = Verdict(True, 0)


# ----- reading the policy's words ------------------------------------------------------------------


def parse_duration(text: object) -> int:
    """`4h`, `90m`, `1h30m` in seconds: more than 0, at most 7 days (168h)."""
    if not isinstance(text, str):
        raise WindowError(f'must be hours and/or minutes like "4h", "90m" or "1h30m", got {text!r}')
    match = _DURATION.match(text.strip())
    if not text.strip() or not match:
        raise WindowError(f'must be hours and/or minutes like "4h", "90m" or "1h30m", got {text!r}')
    seconds = int(match.group(1) or 0) * 3600 + int(match.group(2) or 0) * 60
    if seconds <= 0:
        raise WindowError(f"must be longer than 0, got {text!r}")
    if seconds > MAX_DURATION:
        raise WindowError(f"must be at most 7 days (168h), got {text!r}")
    return seconds


def format_duration(seconds: int) -> str:
    hours, minutes = divmod(seconds // 60, 60)
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes or not hours else "")


def check_zone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise WindowError(f"not a known IANA time zone: {name!r}") from None
    return name


def check_cron(expr: str) -> str:
    """A 5-field cron expression (minute hour day-of-month month day-of-week) that fires at all."""
    fields = expr.split()
    if len(fields) != 5:
        raise WindowError(f"must be a 5-field cron expression (minute hour day month weekday), got {expr!r}")
    if not croniter.is_valid(expr):
        raise WindowError(f"not a valid cron expression: {expr!r}")
    try:  # from a fixed day: the answer must not depend on when the policy is loaded
        croniter(expr, datetime(2000, 1, 1), max_years_between_matches=YEARS).get_next(datetime)
    except CroniterBadDateError:
        raise WindowError(f"never fires (no start within {YEARS} years): {expr!r}") from None
    except CroniterError as exc:
        raise WindowError(f"not a valid cron expression: {expr!r} ({exc})") from None
    return " ".join(fields)


def day_index(name: str) -> int:
    """Monday 0 .. Sunday 6, from `Mon` or `Monday` (any case)."""
    key = name.strip().lower()
    if key in DAYS:
        return DAYS.index(key)
    if key in FULL_DAYS:
        return FULL_DAYS.index(key)
    raise WindowError(f"not a day of the week: {name!r} (Mon..Sun or Monday..Sunday)")


def days_cron(days: Sequence[int], start: str) -> str:
    """The cron expression for `start` (HH:MM) on these weekdays (Monday 0)."""
    match = _START.match(start)
    if not match:
        raise WindowError(f'must be a time of day "HH:MM" (00:00 to 23:59), got {start!r}')
    cron_days = sorted({(d + 1) % 7 for d in days})  # cron: Sunday 0, Monday 1
    return f"{int(match.group(2))} {int(match.group(1))} * * {','.join(map(str, cron_days))}"


# ----- the verdict ------------------------------------------------------------------------------------


def verdict(windows: Sequence[Window], now: float) -> Verdict:
    if not windows:
        return ALWAYS_OPEN
    open_ends = [(start + w.seconds, w) for w in windows if (start := last_start(w, now)) is not None]
    open_ends = [(end, w) for end, w in open_ends if end > now]
    if open_ends:
        end, window = max(open_ends, key=lambda item: item[0])
        closes = _stretch_end(windows, now, end)
        return Verdict(True, len(windows), window.name, closes, None, window.describe(), window.zone)
    upcoming = [(start, w) for w in windows if (start := next_start(w, now)) is not None]
    if not upcoming:
        return Verdict(False, len(windows))
    start, window = min(upcoming, key=lambda item: item[0])
    return Verdict(False, len(windows), window.name, None, start, window.describe(), window.zone)


def last_start(window: Window, now: float) -> float | None:
    """The latest start at or before `now` (instant), or None when none within the search bounds."""
    zone = ZoneInfo(window.zone)
    local = _wall(now, zone)
    it = croniter(window.cron, local + _SLACK, max_years_between_matches=YEARS, is_prev=True)
    best: float | None = None
    try:
        while True:
            wall = it.get_prev(datetime)
            instant = _instant(wall, zone)
            if instant <= now:
                best = instant if best is None else max(best, instant)
            if wall < local - _SLACK:
                return best
    except CroniterBadDateError:
        return best


def next_start(window: Window, now: float) -> float | None:
    """The first start after `now` (instant), or None when none within YEARS."""
    zone = ZoneInfo(window.zone)
    it = croniter(window.cron, _wall(now, zone) - _SLACK, max_years_between_matches=YEARS)
    try:
        while True:
            instant = _instant(it.get_next(datetime), zone)
            if instant > now:
                return instant
    except CroniterBadDateError:
        return None


def _stretch_end(windows: Sequence[Window], now: float, end: float) -> float | None:
    """The end of the open stretch that ends no earlier than `end`: a window that opens before (or
    as) another closes carries it on. None when it runs past HORIZON (always open, in effect)."""
    for _ in range(_MERGES):
        if end > now + HORIZON:
            return None
        later = [start + w.seconds for w in windows if (start := last_start(w, end)) is not None]
        furthest = max([end, *later])
        if furthest <= end:
            return end
        end = furthest
    return None


def _wall(t: float, zone: ZoneInfo) -> datetime:
    """Local wall time at instant `t`, naive."""
    return datetime.fromtimestamp(t, tz=UTC).astimezone(zone).replace(tzinfo=None)


def _instant(wall: datetime, zone: ZoneInfo) -> float:
    """A naive local wall time on the time line: fold 0, i.e. the offset before a DST change (a skipped
    time lands after the jump by the size of the gap; a repeated time is its first occurrence)."""
    return wall.replace(tzinfo=zone, fold=0).timestamp()


def _stamp(t: float | None) -> str | None:
    return None if t is None else rfc3339(t)


def local_text(t: float, zone: str) -> str:
    """`2026-03-29 03:30 CEST` in the window's zone: what an operator reads beside the UTC stamp."""
    return datetime.fromtimestamp(t, tz=UTC).astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")

