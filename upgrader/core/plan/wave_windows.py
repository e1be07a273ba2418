"""Which wave of a plan starts in which maintenance window: a walk forward in time from `now`.

Pure: `now` is epoch seconds handed in; nothing here reads a clock. The plan knows the waves in
order and the policy, not how long a wave takes: the user gives that (`plan --wave-duration`), and
every time here is an estimate built on it.

The walk (docs/policy.md, "Maintenance windows"): t = now; before a wave whose failure domain
differs from the previous wave's, add the soak; the wave starts at t if a window is open at t, else
at the next opening; it ends `duration` after its start (nodes in progress finish past a close);
t = its end. The in-progress wave (0) has started already: it waits for no window and ends by
now + duration. The alert gate can hold starts further; nothing here asks Prometheus.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from upgrader.core.model.timefmt import rfc3339
from upgrader.core.policy.policy import Policy
from upgrader.core.policy.windows import Window, local_text, verdict

MISSING = (
    "give --wave-duration (how long one wave takes, e.g. 45m) to predict which wave starts in which window"
)


@dataclass(frozen=True)
class Slot:
    """One wave on the time line. `starts_at` None: in progress already (wave 0), or it never starts."""

    wave: int
    domain: str
    starts_at: float | None
    ends_at: float | None
    window: str | None = None  # the window open at `starts_at`
    zone: str | None = None  # that window's time zone: the local times below are read there
    closes_at: float | None = None  # the end of the open stretch it starts in; None: not within 8 days
    past_close: int = 0  # seconds it runs past `closes_at` (its nodes finish; no later wave starts)

    def local(self, t: float) -> str:
        return local_text(t, self.zone or "UTC")

    def to_dict(self) -> dict[str, Any]:
        return {
            "starts_at": _stamp(self.starts_at),
            "ends_at": _stamp(self.ends_at),
            "window": self.window,
            "starts_local": None if self.starts_at is None else self.local(self.starts_at),
            "window_closes_at": _stamp(self.closes_at),
            "past_close_seconds": self.past_close,
        }


@dataclass(frozen=True)
class Prediction:
    """The walk over a plan's waves; `duration` None: not given, nothing predicted (`MISSING` says how)."""

    duration: int | None
    soak: int
    now: float
    slots: list[Slot] = field(default_factory=list)
    zone: str = "UTC"  # of the window open at `now`, or next to open: for times outside any window
    never_after: float | None = None  # no window opens within 8 years after this: later waves never start
    alert_gate: bool = False  # the policy has one: starts can wait longer than predicted

    def to_dict(self) -> dict[str, Any]:
        """The summary's `wave_windows`."""
        return {
            "wave_duration_seconds": self.duration,
            "predicted": self.duration is not None,
            "never_opens_after": _stamp(self.never_after),
            "note": MISSING if self.duration is None else note(self),
        }

    def waves(self, waves: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The plan's `waves`, each with its slot's fields when there is a prediction."""
        slots = {s.wave: s for s in self.slots}
        return [{**w, **slots[w["wave"]].to_dict()} if w["wave"] in slots else dict(w) for w in waves]


def note(prediction: Prediction) -> str:
    """What the times rest on, in one clause: the table's heading and the JSON's `note`."""
    duration = prediction.duration or 0
    text = f"one wave takes {span(duration)} (--wave-duration, an estimate), soak {prediction.soak}s between domains"
    if prediction.alert_gate:
        text += "; the alert gate can delay starts further (plan does not ask Prometheus)"
    return text


def for_plan(
    waves: Sequence[Mapping[str, Any]], policy: Policy, now: float, duration: int | None
) -> Prediction | None:
    """The prediction `plan` shows: None when the policy has no windows (nothing to predict)."""
    windows = policy.windows()
    if not windows:
        return None
    # The canary domain's first nodes soak before the rest of it, as before the next domain.
    order = [(int(w["wave"]), f"{w['domain']}, canary nodes" if w.get("canary_nodes") else str(w["domain"]))
             for w in waves]
    soak = policy.failure_domains.soak_seconds
    gate = policy.alert_gate is not None
    if duration is None:
        return Prediction(None, soak, now, alert_gate=gate)
    return predict(order, windows, soak, now, duration, alert_gate=gate)


def predict(
    waves: Sequence[tuple[int, str]],
    windows: Sequence[Window],
    soak: int,
    now: float,
    duration: int,
    alert_gate: bool = False,
) -> Prediction:
    """Walk `waves` (number, failure domain), in order, through `windows` from `now`."""
    slots: list[Slot] = []
    t = now
    previous: str | None = None
    never_after: float | None = None
    for number, domain in waves:
        if previous is not None and domain != previous:
            t += soak
        previous = domain
        if number == 0:  # started before now: it finishes whatever the windows say
            t += duration
            slots.append(Slot(number, domain, None, t))
            continue
        if never_after is None:
            here = verdict(windows, t)
            if not here.open and here.next_open is None:
                never_after = t
            else:
                start = here.next_open if here.next_open is not None else t  # open now: no next_open
                at_start = verdict(windows, start) if start != t else here
                end = start + duration
                closes = at_start.closes_at
                past = max(0, math.ceil(end - closes)) if closes is not None else 0
                slots.append(Slot(number, domain, start, end, at_start.window, at_start.zone, closes, past))
                t = end
                continue
        slots.append(Slot(number, domain, None, None))
    zone = verdict(windows, now).zone or "UTC"
    return Prediction(duration, soak, now, slots, zone, never_after, alert_gate)


def span(seconds: int) -> str:
    """`45m`, `1h30m`, `2h`, `1m5s`: an elapsed time as the policy writes durations."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"


def _stamp(t: float | None) -> str | None:
    return None if t is None else rfc3339(t)
