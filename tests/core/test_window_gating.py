"""Maintenance windows in whole passes: no node starts while no window is open, a node in progress
goes on through the window's end, and the next node starts when the (virtual) clock reaches the
next opening. Clock: plain epoch seconds from T0 (2023-11-14T22:13:20Z, a Tuesday)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from upgrader.core.model.actions import Event
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.model.views import Control
from upgrader.core.report.entries import WindowReport
from upgrader.core.rollout.reconcile import PassOutcome, reconcile

from .factories import OLD, T0, driver_pod, gpu_pod, node, policy, snapshot, validator
from .test_rollout import World

S = State
NEXT_OPEN = T0 + 86_400 - 800  # 2023-11-15T22:00:00Z
CLOSED = (
    "no maintenance window is open: the next, nightly (0 22 * * * UTC, 20m), opens at 2023-11-15T22:00:00Z "
    "(2023-11-15 22:00 UTC); nodes in progress finish, none starts before"
)


def fleet() -> World:
    nodes = [node(name, S.UPGRADE_REQUIRED, zone="z") for name in ("a", "b")]
    pods = [p for n in ("a", "b") for p in (driver_pod(n, revision=OLD), validator(n), gpu_pod(f"train-{n}", n))]
    return World(snapshot(nodes, pods))


NIGHTLY: dict[str, Any] = {"maxParallelUpgrades": 1, "maintenanceWindows": [
    {"name": "nightly", "schedule": "0 22 * * *", "duration": "20m"}  # 22:00 to 22:20 UTC
]}


def run(world: World, now: float, events: list[Event]) -> PassOutcome:
    """One pass as the controller runs it; the status it writes is the next pass's `previous`."""

    def apply(actions: list[Any]) -> list[Any]:
        events.extend(a for a in actions if isinstance(a, Event) and a.message.startswith("rollout waiting"))
        return world.apply(actions)

    outcome = reconcile(world.snap, policy(**NIGHTLY), now, apply)
    world.snap = replace(world.snap, control=Control(previous=outcome.status))
    return outcome


def states(world: World) -> dict[str, str]:
    return {n.name: n.labels.get(STATE_LABEL, "") for n in world.snap.nodes.values()}


def test_no_start_outside_the_window_in_progress_finishes_next_starts_at_the_opening() -> None:
    world, events = fleet(), list[Event]()
    first = run(world, T0, events)  # 22:13:20, the window is open until 22:20
    assert first.started == ["a"]
    assert first.status.maintenance_window == WindowReport(
        True, "nightly", "nightly (0 22 * * * UTC, 20m)", "2023-11-14T22:20:00Z", None
    )
    now = T0
    while now < T0 + 1200:  # a pass a minute: a is still going when the window closes at T0 + 400
        now += 60
        last = run(world, now, events)
        if now == T0 + 420:
            assert states(world)["a"] not in ("upgrade-done", "upgrade-required")  # in progress past the end
    assert states(world) == {"a": "upgrade-done", "b": "upgrade-required"}
    assert (last.status.phase, last.status.message) == ("Running", CLOSED)
    assert last.status.waiting_on.reason == "maintenance-window"
    assert last.status.waiting_on.until == "2023-11-15T22:00:00Z"
    assert last.status.maintenance_window.open is False
    # One Event per wait, however many passes it lasts: b waits for a while the window is open, then
    # for the window (on b, the node that starts next), with a still in progress when it closed.
    assert events == [
        Event("a", "Normal", "rollout waiting: maxParallelUpgrades 1 reached: a (in progress)"),
        Event("b", "Normal", f"rollout waiting: {CLOSED}"),
    ]

    before = run(world, NEXT_OPEN - 1, events)
    assert before.started == [] and states(world)["b"] == "upgrade-required"
    opened = run(world, NEXT_OPEN, events)
    assert opened.started == ["b"] and states(world)["b"] == "cordon-required"
    assert opened.status.maintenance_window.closes_at == "2023-11-15T22:20:00Z"
    assert len(events) == 2


def test_without_windows_a_node_starts_at_any_hour() -> None:
    world = fleet()
    outcome = reconcile(world.snap, policy(maxParallelUpgrades=1), T0 + 3600, world.apply)
    assert outcome.started == ["a"] and outcome.status.maintenance_window is None
