"""`upgrader plan` says whether a maintenance window is open now, until when, or when the next opens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytest_mock import MockerFixture

from upgrader.commands import handlers as commands
from upgrader.core.model.timefmt import parse_rfc3339

from .test_plan_budgets import plan

NIGHTLY = {"maintenanceWindows": [
    {"name": "nightly", "schedule": "0 22 * * *", "duration": "4h", "timeZone": "Europe/Berlin"}
]}


def at(mocker: MockerFixture, stamp: str) -> None:
    """The plan's `now`: the command reads the clock once, here."""
    mocker.patch.object(commands, "time").time.return_value = parse_rfc3339(stamp)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("WINDOWS:")]


def test_closed_now_says_when_the_next_window_opens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-07-10T12:00:00Z")  # 14:00 in Berlin
    assert lines(plan(tmp_path, capsys, NIGHTLY)) == [
        "WINDOWS: closed now: no node starts before nightly (0 22 * * * Europe/Berlin, 4h) opens at "
        "2026-07-10T20:00:00Z (2026-07-10 22:00 CEST); 1 maintenance window"
    ]


def test_open_now_says_until_when(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-01-10T22:30:00Z")  # 23:30 in Berlin, winter
    assert lines(plan(tmp_path, capsys, NIGHTLY)) == [
        "WINDOWS: open now, nightly (0 22 * * * Europe/Berlin, 4h), until 2026-01-11T01:00:00Z "
        "(2026-01-11 02:00 CET); 1 maintenance window"
    ]
    summary = json.loads(plan(tmp_path, capsys, NIGHTLY, output="json"))["summary"]
    assert summary["maintenance_window"] == {
        "open": True, "window": "nightly", "about": "nightly (0 22 * * * Europe/Berlin, 4h)",
        "closes_at": "2026-01-11T01:00:00Z", "next_open": None,
    }


def test_without_windows_no_line_and_no_summary_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lines(plan(tmp_path, capsys, {})) == []
    assert json.loads(plan(tmp_path, capsys, {}, output="json"))["summary"]["maintenance_window"] is None
