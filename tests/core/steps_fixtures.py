"""What the step tests expect a step to conclude with: a transition, a block, a failure."""

from __future__ import annotations

from typing import Any

from upgrader.core.model.actions import Annotate, Event, Transition
from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    DRIVER_DELETED_AT,
    DRIVER_POD_UID,
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    STATE_SINCE,
    TARGET_REVISION,
    State,
)

from .factories import NEW, T0, at

S = State
CLEARED_BLOCK = {BLOCKED_KIND: None, BLOCKED_REASON: None, BLOCKED_SINCE: None}
# What a node records on entering pod-restart-required: the pod to replace, a fresh restart clock,
# the revision to reach.
RESTART_ENTRY: dict[str, str | None] = {DRIVER_POD_UID: "driver-old", DRIVER_DELETED_AT: None, TARGET_REVISION: NEW}


def moved(source: State, target: State, now: float, **extra: str | None) -> Transition:
    """The transition a finished step concludes with."""
    return Transition(
        "n1",
        source,
        target,
        {STATE_SINCE: rfc(now), **CLEARED_BLOCK, **extra},
        f"{source.value} -> {target.value}",
    )


def rfc(now: float) -> str:
    return at(now - T0)


def blocked(kind: str, reason: str, since: str, state: State, runbook: str) -> list[Any]:
    return [
        Annotate("n1", {BLOCKED_KIND: kind, BLOCKED_REASON: reason, BLOCKED_SINCE: since}),
        Event("n1", "Warning", f"blocked in {state.value} since {since}: {reason}; see runbooks/{runbook}.md"),
    ]


def failed(
    state: State, kind: str, reason: str, now: float, runbook: str, ready_driver: str | None = None
) -> list[Any]:
    """`ready_driver`: the driver pod Ready at the newest revision the failure records (recovery)."""
    stamp = rfc(now)
    return [
        Transition(
            "n1",
            state,
            S.FAILED,
            {
                STATE_SINCE: stamp,
                FAILED_AT: stamp,
                FAILED_KIND: kind,
                FAILED_STATE: state.value,
                FAILED_REASON: reason,
                FAILED_DRIVER_POD: ready_driver,
                **CLEARED_BLOCK,
            },
            reason,
        ),
        Event("n1", "Warning", f"upgrade failed in {state.value}: {reason}; see runbooks/{runbook}.md"),
    ]
