"""`upgrader status`'s table names what paces starts besides the budgets: the wait and since when,
the maintenance window, and the alert gate, each only when there is one."""

from __future__ import annotations

from typing import Any

from upgrader.commands.statusview import gate_lines, render_table

WINDOW_CLOSED = {"open": False, "window": "nightly", "about": "nightly (0 22 * * * UTC, 4h)",
                 "closes_at": None, "next_open": "2026-12-01T22:00:00Z"}
WINDOW_OPEN = {**WINDOW_CLOSED, "open": True, "closes_at": "2026-12-02T02:00:00Z", "next_open": None}
GATE = {"open": False, "prometheus": "http://prom:9090", "firing": ['SLOBurn{severity="critical"} since T'],
        "error": None}


def status(**extra: Any) -> dict[str, Any]:
    return {"phase": "Running", "message": "m", "nodes_by_state": {}, **extra}


def test_nothing_configured_nothing_waiting_adds_no_line() -> None:
    assert gate_lines(status()) == []


def test_each_gate_in_words() -> None:
    lines = gate_lines(status(
        waiting_on={"reason": "alert-firing"}, waiting_since="2026-12-01T20:00:00Z",
        maintenance_window=WINDOW_OPEN, alert_gate=GATE,
    ))
    assert lines == [
        "WAITING ON: alert-firing since 2026-12-01T20:00:00Z",
        "WINDOW: open, nightly (0 22 * * * UTC, 4h) until 2026-12-02T02:00:00Z",
        'ALERT GATE: closed, firing in Prometheus http://prom:9090: SLOBurn{severity="critical"} since T',
    ]
    assert gate_lines(status(maintenance_window=WINDOW_CLOSED, alert_gate={**GATE, "firing": [],
                                                                              "error": "unreachable: refused"})) == [
        "WINDOW: closed; the next, nightly (0 22 * * * UTC, 4h), opens at 2026-12-01T22:00:00Z",
        "ALERT GATE: closed, cannot read Prometheus http://prom:9090: unreachable: refused",
    ]
    assert gate_lines(status(maintenance_window={**WINDOW_CLOSED, "next_open": None},
                             alert_gate={**GATE, "open": True, "firing": []})) == [
        "WINDOW: closed; none opens within 8 years",
        "ALERT GATE: open, no matching alert firing in Prometheus http://prom:9090",
    ]


def test_the_table_shows_them_under_the_header() -> None:
    table = render_table(status(waiting_on={"reason": "maintenance-window"}, waiting_since="2026-12-01T12:00:00Z",
                                maintenance_window=WINDOW_CLOSED)).splitlines()
    assert table[:4] == [
        "PHASE: Running   m",
        "UPDATED: (never)   NODES: 0",
        "WAITING ON: maintenance-window since 2026-12-01T12:00:00Z",
        "WINDOW: closed; the next, nightly (0 22 * * * UTC, 4h), opens at 2026-12-01T22:00:00Z",
    ]


def test_a_refused_spec_is_said_under_the_phase_and_an_accepted_one_is_not() -> None:
    why = "driverrollout.gpu-upgrader.io/default: spec.maxUnavailable: bad; generation 4 stays in force"
    refused = {"type": "Valid", "status": "False", "reason": "SpecRefused",
               "lastTransitionTime": "2026-12-03T10:00:00Z", "message": why}
    table = render_table(status(rollout={"name": "n", "generation": 5, "conditions": [refused]})).splitlines()
    assert table[2] == f"SPEC REFUSED (generation 5) since 2026-12-03T10:00:00Z: {why}"
    accepted = {**refused, "status": "True", "reason": "SpecAccepted"}
    table = render_table(status(rollout={"name": "n", "generation": 5, "conditions": [accepted]}))
    assert "SPEC REFUSED" not in table


def test_the_eta_is_said_beside_the_nodes_when_there_is_one() -> None:
    eta = {"at": "2026-12-03T18:00:00Z", "node_seconds": 420, "from_nodes": 12, "nodes_left": 40}
    assert render_table(status(eta=eta, nodes_total=52)).splitlines()[1].endswith(
        "NODES: 52   ETA: 2026-12-03T18:00:00Z (40 nodes left, 420s a node, median of 12)")
    assert "ETA" not in render_table(status(eta=None))
