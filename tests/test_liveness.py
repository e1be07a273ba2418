"""Judging a controller from its Lease (upgrader/commands/liveness.py): alive only while a holder's renewal is
younger than its leaseDurationSeconds; anything else is said, never taken for a running controller."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.commands.liveness import ago, judge_lease, unreadable
from upgrader.core.model.timefmt import rfc3339, rfc3339_micro

T = 1_800_000_000.0
WHERE = "upgrader-system/gpu-driver-upgrader"


def lease(holder: Any = "upgrader-7d9-x", renewed: Any = T, duration: Any = 15) -> dict[str, Any]:
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration}
    if renewed is not None:
        spec["renewTime"] = rfc3339_micro(renewed) if isinstance(renewed, float) else renewed
    return {"spec": spec}


def test_a_fresh_renewal_is_a_running_controller() -> None:
    seen = judge_lease(lease(), WHERE, T + 5)
    assert seen.alive is True and seen.warning(T + 5) is None
    assert seen.to_dict() == {"lease": WHERE, "holder": "upgrader-7d9-x", "renewed": rfc3339(T),
                              "expires": rfc3339(T + 15), "alive": True}
    assert seen.line(T + 5) == (f"CONTROLLER: upgrader-7d9-x (Lease {WHERE} renewed {rfc3339(T)} (5s ago), "
                                f"expires {rfc3339(T + 15)})")


def test_an_expired_renewal_is_no_controller() -> None:
    seen = judge_lease(lease(), WHERE, T + 15 + 312)
    assert seen.alive is False
    assert seen.warning(T + 327) == (
        f"no controller is running: Lease {WHERE} last renewed by upgrader-7d9-x at {rfc3339(T)}, "
        "expired 5m12s ago; this status may be stale"
    )


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        (None, "no Lease"),
        (lease(holder=None, renewed="1970-01-01T00:00:00.000000Z"), "has no holder (released)"),
        (lease(holder=""), "has no holder"),
        (lease(renewed=None), "last renewed by upgrader-7d9-x at (never)"),
        (lease(renewed="yesterday"), "at (never)"),
        (lease(duration="abc"), "last renewed by upgrader-7d9-x"),
        (lease(duration=0), "last renewed by upgrader-7d9-x"),
        ({"spec": None}, "has no holder"),
    ],
)
def test_what_cannot_be_judged_alive_is_not(obj: Any, words: str) -> None:
    seen = judge_lease(obj, WHERE, T + 1)
    assert seen.alive is False
    warning = seen.warning(T + 1)
    assert warning is not None and warning.startswith("no controller is running: ") and words in warning
    assert warning.endswith("; this status may be stale")


def test_an_unreadable_lease_is_unknown() -> None:
    seen = unreadable(WHERE, 'leases.coordination.k8s.io "gpu-driver-upgrader" is forbidden')
    assert seen.alive is None and seen.to_dict()["alive"] is None
    assert seen.warning(T) == (
        f"cannot tell whether a controller is running: cannot read Lease {WHERE}: "
        'leases.coordination.k8s.io "gpu-driver-upgrader" is forbidden; this status may be stale'
    )


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (119, "119s"), (312, "5m12s"), (7300, "2h01m"),
                                               (200000, "2d07h"), (-3, "0s")])
def test_ago(seconds: float, text: str) -> None:
    assert ago(seconds) == text


@pytest.mark.parametrize("ahead", [2.0, 900.0])
def test_a_renewal_in_the_future_is_clock_skew_never_a_fresh_lease(ahead: float) -> None:
    """A dead replica whose clock ran ahead left renewTime in our future: not "renewed 0s ago"."""
    seen = judge_lease(lease(renewed=T + ahead), WHERE, T)
    assert seen.alive is None
    assert seen.warning(T) == (
        f"cannot tell whether a controller is running: Lease {WHERE} was renewed by upgrader-7d9-x at "
        f"{rfc3339(T + ahead)}, {ago(ahead)} ahead of the API server's clock (stamped by a replica whose clock "
        "runs ahead: clock skew); this status may be stale"
    )
    assert seen.line(T) == f"CONTROLLER: unknown (Lease {WHERE} renewTime {ago(ahead)} in the API server's future)"


def test_a_renewal_a_moment_ahead_is_within_the_skew_tolerance() -> None:
    assert judge_lease(lease(renewed=T + 0.5), WHERE, T).alive is True
