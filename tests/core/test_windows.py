"""Maintenance windows on a virtual clock: plain epoch seconds in, verdicts out."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from upgrader.controller.settings import load_policy
from upgrader.core.model.timefmt import parse_rfc3339, rfc3339
from upgrader.core.policy.windows import Verdict, Window, parse_duration, verdict
from upgrader.inputs import ConfigError

H = 3600


def t(stamp: str) -> float:
    return parse_rfc3339(stamp)


def check(windows: list[Window], stamp: str) -> dict[str, object]:
    result = asdict(verdict(windows, t(stamp)).report())
    result.pop("about")
    return result


def is_open(closes: str | None, window: str = "w") -> dict[str, object]:
    return {"open": True, "window": window, "closes_at": closes, "next_open": None}


def closed(next_open: str | None, window: str | None = "w") -> dict[str, object]:
    return {"open": False, "window": window, "closes_at": None, "next_open": next_open}


def test_no_windows_is_always_open() -> None:
    assert verdict([], 0.0) == Verdict(True, 0)


def test_a_window_spanning_midnight() -> None:
    w = [Window("w", "0 22 * * *", 4 * H, "UTC")]  # 22:00 to 02:00
    assert check(w, "2026-01-01T21:59:59Z") == closed("2026-01-01T22:00:00Z")
    assert check(w, "2026-01-01T22:00:00Z") == is_open("2026-01-02T02:00:00Z")
    assert check(w, "2026-01-02T00:30:00Z") == is_open("2026-01-02T02:00:00Z")  # after midnight: yesterday's
    assert check(w, "2026-01-02T01:59:59Z") == is_open("2026-01-02T02:00:00Z")
    assert check(w, "2026-01-02T02:00:00Z") == closed("2026-01-02T22:00:00Z")  # the end is not in it


def test_local_time_follows_dst_in_the_window_zone() -> None:
    """02:00 Berlin is 01:00Z in winter and 00:00Z in summer."""
    w = [Window("w", "0 2 * * *", 4 * H, "Europe/Berlin")]
    assert check(w, "2026-01-10T01:00:00Z") == is_open("2026-01-10T05:00:00Z")
    assert check(w, "2026-07-10T00:00:00Z") == is_open("2026-07-10T04:00:00Z")
    assert check(w, "2026-07-09T23:59:59Z") == closed("2026-07-10T00:00:00Z")


def test_spring_forward_a_skipped_start_opens_after_the_jump_for_its_whole_duration() -> None:
    """Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00Z). 02:30 does not exist that night:
    read with the offset before the jump it is 01:30Z, 03:30 CEST; the window lasts its 1h from there."""
    w = [Window("w", "30 2 * * *", H, "Europe/Berlin")]
    assert check(w, "2026-03-29T00:00:00Z") == closed("2026-03-29T01:30:00Z")
    assert check(w, "2026-03-29T01:29:59Z") == closed("2026-03-29T01:30:00Z")
    assert check(w, "2026-03-29T01:30:00Z") == is_open("2026-03-29T02:30:00Z")
    assert check(w, "2026-03-29T02:30:00Z") == closed("2026-03-30T00:30:00Z")  # the next night, in CEST


def test_spring_forward_a_window_across_the_jump_lasts_its_elapsed_duration() -> None:
    """America/New_York, 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00Z). A 01:00 EST window of 4h
    opens at 06:00Z and closes 4 hours later, 10:00Z, which reads 06:00 EDT on the wall."""
    w = [Window("w", "0 1 * * *", 4 * H, "America/New_York")]
    assert check(w, "2026-03-08T06:00:00Z") == is_open("2026-03-08T10:00:00Z")
    assert check(w, "2026-03-08T09:59:59Z") == is_open("2026-03-08T10:00:00Z")
    assert check(w, "2026-03-08T10:00:00Z") == closed("2026-03-09T05:00:00Z")  # 01:00 EDT


def test_fall_back_a_repeated_start_opens_once_at_its_first_occurrence() -> None:
    """Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00Z); 02:30 happens at 00:30Z and
    again at 01:30Z. The window opens once, at 00:30Z, and is not opened again by the repeat."""
    w = [Window("w", "30 2 * * *", H, "Europe/Berlin")]
    assert check(w, "2026-10-25T00:29:59Z") == closed("2026-10-25T00:30:00Z")
    assert check(w, "2026-10-25T01:10:00Z") == is_open("2026-10-25T01:30:00Z")  # 02:10 CET, the second time
    assert check(w, "2026-10-25T01:30:00Z") == closed("2026-10-26T01:30:00Z")  # the repeat of 02:30: closed
    assert check(w, "2026-10-25T01:45:00Z") == closed("2026-10-26T01:30:00Z")


def test_fall_back_a_window_across_the_repeated_hour_lasts_its_elapsed_duration() -> None:
    """A 02:00 window of 4h on the fall-back night closes at 05:00 CET on the wall (04:00Z), not 06:00."""
    w = [Window("w", "0 2 * * *", 4 * H, "Europe/Berlin")]
    assert check(w, "2026-10-25T00:00:00Z") == is_open("2026-10-25T04:00:00Z")
    assert check(w, "2026-10-25T04:00:00Z") == closed("2026-10-26T01:00:00Z")


def test_several_windows_the_first_to_open_and_back_to_back_stretches() -> None:
    early = Window("early", "0 1 * * *", H, "UTC")  # 01:00-02:00
    late = Window("late", "0 2 * * *", 2 * H, "UTC")  # 02:00-04:00, right after early: one stretch
    tokyo = Window("tokyo", "0 9 * * *", H, "Asia/Tokyo")  # 00:00-01:00Z
    windows = [early, late, tokyo]
    assert check(windows, "2026-05-01T23:00:00Z") == closed("2026-05-02T00:00:00Z", "tokyo")
    assert check(windows, "2026-05-02T00:30:00Z") == is_open("2026-05-02T04:00:00Z", "tokyo")  # all three
    assert check(windows, "2026-05-02T01:30:00Z") == is_open("2026-05-02T04:00:00Z", "early")  # late follows on
    assert check(windows, "2026-05-02T03:00:00Z") == is_open("2026-05-02T04:00:00Z", "late")
    assert check(windows, "2026-05-02T04:00:00Z") == closed("2026-05-03T00:00:00Z", "tokyo")


def test_overlapping_starts_of_one_window_keep_it_open() -> None:
    every_hour = [Window("w", "0 * * * *", 2 * H, "UTC")]  # always open: no close within sight
    assert check(every_hour, "2026-05-02T03:10:00Z") == is_open(None)


def test_days_of_week_form(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "maintenanceWindows:\n"
        "- name: weekend\n  days: [Sat, sunday]\n  start: '23:00'\n  duration: 1h30m\n  timeZone: America/New_York\n"
    )
    windows = load_policy(str(path)).windows()
    assert windows == [Window("weekend", "0 23 * * 0,6", 90 * 60, "America/New_York")]
    # 2026-05-01 is a Friday: closed until Saturday 23:00 EDT (03:00Z Sunday)
    assert check(windows, "2026-05-01T12:00:00Z") == closed("2026-05-03T03:00:00Z", "weekend")
    assert check(windows, "2026-05-03T04:29:59Z") == is_open("2026-05-03T04:30:00Z", "weekend")
    assert check(windows, "2026-05-03T04:30:00Z") == closed("2026-05-04T03:00:00Z", "weekend")  # Sunday 23:00
    assert check(windows, "2026-05-04T04:30:00Z") == closed("2026-05-10T03:00:00Z", "weekend")  # next Saturday


def test_a_leap_day_schedule_finds_its_next_opening_years_ahead() -> None:
    w = [Window("w", "0 0 29 2 *", H, "UTC")]
    assert check(w, "2026-03-01T00:00:00Z") == closed("2028-02-29T00:00:00Z")


def test_the_verdict_describes_the_window_in_its_zone() -> None:
    w = [Window("nightly", "0 2 * * *", 4 * H, "Europe/Berlin")]
    v = verdict(w, t("2026-07-09T12:00:00Z"))
    assert v.about == "nightly (0 2 * * * Europe/Berlin, 4h)"
    assert v.next_open is not None and (rfc3339(v.next_open), v.local(v.next_open)) == (
        "2026-07-10T00:00:00Z", "2026-07-10 02:00 CEST"
    )


@pytest.mark.parametrize(("text", "seconds"), [("4h", 4 * H), ("90m", 5400), ("1h30m", 5400), ("168h", 168 * H)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


W = "maintenanceWindows:\n- "


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (W + "schedule: '0 0 30 2 *'\n  duration: 4h\n",
         "maintenanceWindows.0.schedule: never fires (no start within 8 years): '0 0 30 2 *'"),
        (W + "schedule: '0 2 * *'\n  duration: 4h\n",
         "maintenanceWindows.0.schedule: must be a 5-field cron expression (minute hour day month weekday), "
         "got '0 2 * *'"),
        (W + "schedule: '0 2 * * * 0'\n  duration: 4h\n",
         "maintenanceWindows.0.schedule: must be a 5-field cron expression (minute hour day month weekday), "
         "got '0 2 * * * 0'"),
        (W + "schedule: '61 2 * * *'\n  duration: 4h\n",
         "maintenanceWindows.0.schedule: not a valid cron expression: '61 2 * * *'"),
        (W + "schedule: '0 2 * * *'\n  duration: 0h\n",
         "maintenanceWindows.0.duration: must be longer than 0, got '0h'"),
        (W + "schedule: '0 2 * * *'\n  duration: 169h\n",
         "maintenanceWindows.0.duration: must be at most 7 days (168h), got '169h'"),
        (W + "schedule: '0 2 * * *'\n  duration: 240\n",
         'maintenanceWindows.0.duration: must be hours and/or minutes like "4h", "90m" or "1h30m", got 240'),
        (W + "schedule: '0 2 * * *'\n  duration: 4 hours\n",
         'maintenanceWindows.0.duration: must be hours and/or minutes like "4h", "90m" or "1h30m", got \'4 hours\''),
        (W + "schedule: '0 2 * * *'\n  duration: 4h\n  timeZone: Mars/Olympus\n",
         "maintenanceWindows.0.timeZone: not a known IANA time zone: 'Mars/Olympus'"),
        (W + "schedule: '0 2 * * *'\n  duration: 4h\n  timeZone: ../etc/passwd\n",
         "maintenanceWindows.0.timeZone: not a known IANA time zone: '../etc/passwd'"),
        (W + "days: [Mon, Funday]\n  start: '02:00'\n  duration: 4h\n",
         "maintenanceWindows.0.days: not a day of the week: 'Funday' (Mon..Sun or Monday..Sunday)"),
        (W + "days: []\n  start: '02:00'\n  duration: 4h\n", "maintenanceWindows.0.days: must name at least one day"),
        (W + "days: [Mon]\n  start: '25:00'\n  duration: 4h\n",
         'maintenanceWindows.0.start: must be a time of day "HH:MM" (00:00 to 23:59), got \'25:00\''),
        (W + "days: [Mon]\n  start: 22:00\n  duration: 4h\n",
         'maintenanceWindows.0.start: must be a quoted time like "22:00" (unquoted, YAML reads it as the number 1320)'),
        (W + "days: [Mon]\n  duration: 4h\n",
         "maintenanceWindows.0: needs schedule (a cron expression), or days and start"),
        (W + "days: [Mon]\n  start: '02:00'\n  schedule: '0 2 * * *'\n  duration: 4h\n",
         "maintenanceWindows.0: give either schedule, or days and start, not both"),
        (W + "schedule: '0 2 * * *'\n", "maintenanceWindows.0.duration: Field required"),
        (W + "schedule: '0 2 * * *'\n  duration: 4h\n  every: day\n", "maintenanceWindows.0.every: unknown key"),
        ("maintenanceWindows: nightly\n", "maintenanceWindows: must be a list of windows, got str"),
        (W + "{name: a, schedule: '0 1 * * *', duration: 1h}\n- {name: a, schedule: '0 2 * * *', duration: 1h}\n",
         "maintenanceWindows: names a window twice: a"),
    ],
)
def test_a_bad_window_is_one_line_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_policy(str(path))
    assert str(err.value) == f"policy {path}: {message}"


@pytest.mark.parametrize("text", ["maintenanceWindows:\n", "maintenanceWindows: []\n", "{}\n"])
def test_no_windows_keeps_todays_behaviour(tmp_path: Path, text: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    assert load_policy(str(path)).windows() == []


def test_a_wait_with_no_opening_in_sight_says_fix_the_policy_and_names_the_runbook() -> None:
    from upgrader.core.rollout.waits import window_closed

    wait = window_closed(Verdict(False, 1), "z", "n1")
    assert (wait.reason, wait.runbook, wait.until) == (
        "maintenance-window", "runbooks/maintenance-window-closed.md", None
    )
    assert wait.text == (
        "no maintenance window is open and none opens within 8 years; fix maintenanceWindows in the policy; "
        "see runbooks/maintenance-window-closed.md"
    )
