"""Is a controller running? Judged from its Lease (coordination.k8s.io/v1), as `upgrader status` shows it.

The status ConfigMap is rewritten only when the status changes, so its age says nothing about
whether a controller still acts; the Lease does: the leader renews it every pass, and a renewal
older than `leaseDurationSeconds` means no replica holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from upgrader.core.model.input_errors import printable
from upgrader.core.model.timefmt import parse_or_none, rfc3339

STALE = "this status may be stale"
# A renewTime further than this ahead of the API server's clock is clock skew, not a fresh renewal: the
# replica stamped it by a clock of its own that runs ahead (docs/operations.md#which-clock-each-timer-runs-on).
SKEW_TOLERANCE = 1.0


def ago(seconds: float) -> str:
    """A duration for people: `42s`, `5m12s`, `3h04m`, `2d03h`."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 3600 * 2:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400 * 2:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


@dataclass(frozen=True)
class ControllerSeen:
    """What the Lease says about the controller: who holds it, renewed when, valid until when."""

    lease: str  # namespace/name
    holder: str | None = None
    renewed: float | None = None
    expires: float | None = None
    alive: bool | None = None  # None: the Lease could not be read, so nobody can tell
    error: str | None = None  # why it could not be read
    found: bool = True  # there is a Lease
    ahead: float | None = None  # seconds its renewTime is ahead of the API server's clock (clock skew)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lease": self.lease,
            "holder": self.holder,
            "renewed": rfc3339(self.renewed) if self.renewed else None,
            "expires": rfc3339(self.expires) if self.expires else None,
            "alive": self.alive,
        }

    def warning(self, now: float) -> str | None:
        """One line when no controller is known to act on this status; None while one holds the Lease."""
        if self.alive:
            return None
        if self.alive is None and self.ahead is not None:
            return (
                f"cannot tell whether a controller is running: Lease {self.lease} was renewed by {self.holder} at "
                f"{rfc3339(self.renewed or 0)}, {ago(self.ahead)} ahead of the API server's clock (stamped by a "
                f"replica whose clock runs ahead: clock skew); {STALE}"
            )
        if self.alive is None:
            return f"cannot tell whether a controller is running: cannot read Lease {self.lease}: {self.error}; {STALE}"
        if not self.found:
            return (
                f"no controller is running: no Lease {self.lease} (none has run here, or it runs with "
                f"--no-leader-election); {STALE}"
            )
        if not self.holder:  # what a controller that shuts down cleanly leaves
            return f"no controller is running: Lease {self.lease} has no holder (released); {STALE}"
        renewed = rfc3339(self.renewed) if self.renewed else "(never)"
        expired = f", expired {ago(now - self.expires)} ago" if self.expires is not None else ""
        return (
            f"no controller is running: Lease {self.lease} last renewed by {self.holder} at {renewed}{expired}; "
            f"{STALE}"
        )

    def line(self, now: float) -> str:
        """The CONTROLLER line of the status table."""
        if self.ahead is not None:
            return f"CONTROLLER: unknown (Lease {self.lease} renewTime {ago(self.ahead)} in the API server's future)"
        if not self.alive:
            return f"CONTROLLER: none (Lease {self.lease})"
        until = f", expires {rfc3339(self.expires)}" if self.expires is not None else ""
        renewed = f" renewed {rfc3339(self.renewed)} ({ago(now - self.renewed)} ago)" if self.renewed else ""
        return f"CONTROLLER: {self.holder} (Lease {self.lease}{renewed}{until})"


def judge_lease(lease: dict[str, Any] | None, where: str, now: float) -> ControllerSeen:
    """The controller as its Lease shows it at `now` (None: there is no Lease)."""
    if lease is None:
        return ControllerSeen(where, alive=False, found=False)
    spec = lease.get("spec") or {}
    holder_value = spec.get("holderIdentity")
    holder = printable(str(holder_value)) if holder_value else None
    renewed = parse_or_none(spec.get("renewTime")) if isinstance(spec.get("renewTime"), str) else None
    if renewed is not None and renewed <= 0:
        renewed = None  # a released Lease carries the epoch
    try:
        duration = float(spec.get("leaseDurationSeconds") or 0)
    except (TypeError, ValueError):
        duration = 0.0
    expires = renewed + duration if renewed is not None and duration > 0 else None
    if holder and renewed is not None and renewed - now > SKEW_TOLERANCE:
        # Renewed "later than now": the clocks disagree, so its age says nothing either way.
        return ControllerSeen(where, holder, renewed, expires, None, ahead=renewed - now)
    alive = bool(holder) and expires is not None and now < expires
    return ControllerSeen(where, holder, renewed, expires, alive)


def unreadable(where: str, error: str) -> ControllerSeen:
    return ControllerSeen(where, alive=None, error=error)
