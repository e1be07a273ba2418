"""`upgrader plan --wave-duration`: which wave starts in which maintenance window, walked forward from now
(upgrader/core/plan/wave_windows.py; docs/policy.md "Maintenance windows")."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_mock import MockerFixture

from upgrader.commands import handlers as commands
from upgrader.commands.cli import main
from upgrader.core.model.states import STATE_LABEL
from upgrader.core.model.timefmt import parse_rfc3339
from upgrader.core.plan import wave_windows
from upgrader.core.plan.wave_windows import predict
from upgrader.core.policy.windows import Verdict, Window, verdict
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

from .test_plan import export

H, M = 3600, 60
NIGHTLY = {"name": "nightly", "schedule": "0 22 * * *", "duration": "4h", "timeZone": "Europe/Berlin"}
ONE_BY_ONE = {"maxParallelUpgrades": 1, "maxUnavailable": 2}  # 4 nodes: waves a, a, b, c


def at(mocker: MockerFixture, stamp: str) -> None:
    mocker.patch.object(commands, "time").time.return_value = parse_rfc3339(stamp)


def run(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    policy: dict[str, Any],
    *flags: str,
    nodes: int = 4,
    craft: Callable[[EmulatedCluster], None] | None = None,
) -> str:
    """`upgrader plan --dry-run --from-file` of the healthy scenario with `flags`: its stdout."""
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy", nodes)
    if craft is not None:
        craft(cluster)
    listing, policy_file = tmp_path / "fleet.json", tmp_path / "policy.yaml"
    listing.write_text(json.dumps(export(cluster)))
    policy_file.write_text(yaml.safe_dump(policy))
    capsys.readouterr()
    main(["plan", "--dry-run", "--from-file", str(listing), "--policy", str(policy_file), *flags])
    return capsys.readouterr().out


def block(text: str) -> list[str]:
    """The `WAVES IN WINDOWS:` line and the indented lines under it."""
    out = text.splitlines()
    if not any(line.startswith("WAVES IN WINDOWS:") for line in out):
        return []
    start = next(i for i, line in enumerate(out) if line.startswith("WAVES IN WINDOWS:"))
    end = next((i for i in range(start + 1, len(out)) if not out[i].startswith("  ")), len(out))
    assert out[start - 1].startswith("WINDOWS:") and out[end].startswith("FINDINGS:")  # under WINDOWS:
    return out[start:end]


def test_four_waves_two_tonight_two_at_the_next_opening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-07-10T12:00:00Z")  # 14:00 in Berlin: closed until 22:00
    policy = {**ONE_BY_ONE, "maintenanceWindows": [NIGHTLY]}
    assert block(run(tmp_path, capsys, policy, "--wave-duration", "2h")) == [
        "WAVES IN WINDOWS: one wave takes 2h (--wave-duration, an estimate), soak 0s between domains",
        "  WAVE 1 (us-east-1a)  starts 2026-07-10 22:00 CEST in nightly, ends 2026-07-11 00:00 CEST",
        "  WAVE 2 (us-east-1a)  starts 2026-07-11 00:00 CEST in nightly, ends 2026-07-11 02:00 CEST",
        "  WAVE 3 (us-east-1b)  starts 2026-07-11 22:00 CEST in nightly, ends 2026-07-12 00:00 CEST",
        "  WAVE 4 (us-east-1c)  starts 2026-07-12 00:00 CEST in nightly, ends 2026-07-12 02:00 CEST",
    ]


def test_a_soak_pushes_the_next_domain_into_the_next_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    """Wave 2 ends 01:50; the 10 minute soak ends at 02:00, as the window closes: us-east-1c waits a day."""
    at(mocker, "2026-07-10T12:00:00Z")
    policy = {"maxParallelUpgrades": 2, "maxUnavailable": "50%", "failureDomains": {"soakSeconds": 600},
              "maintenanceWindows": [NIGHTLY]}
    out = run(tmp_path, capsys, policy, "--wave-duration", "1h50m", nodes=6)
    assert block(out) == [
        "WAVES IN WINDOWS: one wave takes 1h50m (--wave-duration, an estimate), soak 600s between domains",
        "  WAVE 1 (us-east-1a)  starts 2026-07-10 22:00 CEST in nightly, ends 2026-07-10 23:50 CEST",
        "  WAVE 2 (us-east-1b)  starts 2026-07-11 00:00 CEST in nightly, ends 2026-07-11 01:50 CEST",
        "  WAVE 3 (us-east-1c)  starts 2026-07-11 22:00 CEST in nightly, ends 2026-07-11 23:50 CEST",
    ]
    without_soak = {**policy, "failureDomains": {"soakSeconds": 0}}
    assert block(run(tmp_path, capsys, without_soak, "--wave-duration", "1h50m", nodes=6))[1:] == [
        "  WAVE 1 (us-east-1a)  starts 2026-07-10 22:00 CEST in nightly, ends 2026-07-10 23:50 CEST",
        "  WAVE 2 (us-east-1b)  starts 2026-07-10 23:50 CEST in nightly, ends 2026-07-11 01:40 CEST",
        "  WAVE 3 (us-east-1c)  starts 2026-07-11 01:40 CEST in nightly, ends 2026-07-11 03:30 CEST, "
        "1h30m past its close at 2026-07-11 02:00 CEST",
    ]


def test_a_window_across_midnight_carries_waves_into_the_next_day(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-12-31T23:30:00Z")  # open since 23:00 UTC, closes 02:00 on New Year's Day
    window = {"name": "late", "schedule": "0 23 * * *", "duration": "3h"}  # UTC
    assert block(run(tmp_path, capsys, {**ONE_BY_ONE, "maintenanceWindows": [window]}, "--wave-duration", "45m")) == [
        "WAVES IN WINDOWS: one wave takes 45m (--wave-duration, an estimate), soak 0s between domains",
        "  WAVE 1 (us-east-1a)  starts 2026-12-31 23:30 UTC in late, ends 2027-01-01 00:15 UTC",
        "  WAVE 2 (us-east-1a)  starts 2027-01-01 00:15 UTC in late, ends 2027-01-01 01:00 UTC",
        "  WAVE 3 (us-east-1b)  starts 2027-01-01 01:00 UTC in late, ends 2027-01-01 01:45 UTC",
        "  WAVE 4 (us-east-1c)  starts 2027-01-01 01:45 UTC in late, ends 2027-01-01 02:30 UTC, "
        "30m past its close at 2027-01-01 02:00 UTC",
    ]


def test_spring_forward_in_berlin_opens_the_skipped_start_an_hour_late(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    """02:30 does not exist on 2026-03-29: the window opens at 03:30 CEST and lasts its 2h."""
    at(mocker, "2026-03-28T12:00:00Z")
    window = {"name": "dst", "schedule": "30 2 * * *", "duration": "2h", "timeZone": "Europe/Berlin"}
    assert block(run(tmp_path, capsys, {**ONE_BY_ONE, "maintenanceWindows": [window]}, "--wave-duration", "1h")) == [
        "WAVES IN WINDOWS: one wave takes 1h (--wave-duration, an estimate), soak 0s between domains",
        "  WAVE 1 (us-east-1a)  starts 2026-03-29 03:30 CEST in dst, ends 2026-03-29 04:30 CEST",
        "  WAVE 2 (us-east-1a)  starts 2026-03-29 04:30 CEST in dst, ends 2026-03-29 05:30 CEST",
        "  WAVE 3 (us-east-1b)  starts 2026-03-30 02:30 CEST in dst, ends 2026-03-30 03:30 CEST",
        "  WAVE 4 (us-east-1c)  starts 2026-03-30 03:30 CEST in dst, ends 2026-03-30 04:30 CEST",
    ]


def test_fall_back_in_berlin_a_4h_window_from_02_00_closes_at_05_00_and_the_last_wave_runs_past(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-10-24T12:00:00Z")
    window = {"name": "dst", "schedule": "0 2 * * *", "duration": "4h", "timeZone": "Europe/Berlin"}
    out = run(tmp_path, capsys, {**ONE_BY_ONE, "maintenanceWindows": [window]}, "--wave-duration", "1h30m")
    assert block(out) == [
        "WAVES IN WINDOWS: one wave takes 1h30m (--wave-duration, an estimate), soak 0s between domains",
        "  WAVE 1 (us-east-1a)  starts 2026-10-25 02:00 CEST in dst, ends 2026-10-25 02:30 CET",
        "  WAVE 2 (us-east-1a)  starts 2026-10-25 02:30 CET in dst, ends 2026-10-25 04:00 CET",
        "  WAVE 3 (us-east-1b)  starts 2026-10-25 04:00 CET in dst, ends 2026-10-25 05:30 CET, "
        "30m past its close at 2026-10-25 05:00 CET",
        "  WAVE 4 (us-east-1c)  starts 2026-10-26 02:00 CET in dst, ends 2026-10-26 03:30 CET",
    ]


def test_a_wave_starting_just_before_the_close_runs_past_it_and_the_next_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-07-10T23:55:00Z")  # 01:55 CEST: five minutes before nightly closes
    policy = {"maxParallelUpgrades": 2, "maxUnavailable": "50%", "maintenanceWindows": [NIGHTLY]}
    assert block(run(tmp_path, capsys, policy, "--wave-duration", "45m", nodes=6)) == [
        "WAVES IN WINDOWS: one wave takes 45m (--wave-duration, an estimate), soak 0s between domains",
        "  WAVE 1 (us-east-1a)  starts 2026-07-11 01:55 CEST in nightly, ends 2026-07-11 02:40 CEST, "
        "40m past its close at 2026-07-11 02:00 CEST",
        "  WAVE 2 (us-east-1b)  starts 2026-07-11 22:00 CEST in nightly, ends 2026-07-11 22:45 CEST",
        "  WAVE 3 (us-east-1c)  starts 2026-07-11 22:45 CEST in nightly, ends 2026-07-11 23:30 CEST",
    ]


def closed_from(cutoff: str) -> Callable[[list[Window], float], Verdict]:
    """The real verdict until `cutoff`, then no window ever again (a policy cannot say that: every
    5-field schedule fires within 8 years, so the walk's "never" is reached this way)."""

    def fake(windows: list[Window], now: float) -> Verdict:
        return verdict(windows, now) if now < parse_rfc3339(cutoff) else Verdict(False, len(windows))

    return fake


def test_when_no_window_opens_any_more_the_remaining_waves_never_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-07-10T12:00:00Z")
    mocker.patch.object(wave_windows, "verdict", side_effect=closed_from("2026-07-10T22:00:00Z"))
    policy = {**ONE_BY_ONE, "maintenanceWindows": [NIGHTLY]}
    assert block(run(tmp_path, capsys, policy, "--wave-duration", "2h")) == [
        "WAVES IN WINDOWS: one wave takes 2h (--wave-duration, an estimate), soak 0s between domains",
        "  WAVE 1 (us-east-1a)  starts 2026-07-10 22:00 CEST in nightly, ends 2026-07-11 00:00 CEST",
        "  WAVES 2-4            never start: no maintenance window opens within 8 years after 2026-07-11 00:00 CEST",
    ]
    result = json.loads(run(tmp_path, capsys, policy, "--wave-duration", "2h", "-o", "json"))
    assert result["summary"]["wave_windows"]["never_opens_after"] == "2026-07-10T22:00:00Z"
    assert [(w["wave"], w["starts_at"], w["window"]) for w in result["waves"]] == [
        (1, "2026-07-10T20:00:00Z", "nightly"), (2, None, None), (3, None, None), (4, None, None)
    ]


def test_no_window_ever_opens_from_now(mocker: MockerFixture) -> None:
    mocker.patch.object(wave_windows, "verdict", side_effect=closed_from("2000-01-01T00:00:00Z"))
    now = parse_rfc3339("2026-07-10T12:00:00Z")
    result = predict([(1, "a"), (2, "b")], [Window("w", "0 22 * * *", 4 * H, "UTC")], 0, now, H)
    assert (result.never_after, [(s.starts_at, s.ends_at) for s in result.slots]) == (now, [(None, None)] * 2)


def test_without_the_flag_the_plan_says_it_cannot_predict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-07-10T12:00:00Z")
    policy = {**ONE_BY_ONE, "maintenanceWindows": [NIGHTLY]}
    assert block(run(tmp_path, capsys, policy)) == [
        "WAVES IN WINDOWS: give --wave-duration (how long one wave takes, e.g. 45m) to predict which wave starts "
        "in which window"
    ]
    result = json.loads(run(tmp_path, capsys, policy, "-o", "json"))
    assert result["summary"]["wave_windows"] == {
        "wave_duration_seconds": None, "predicted": False, "never_opens_after": None,
        "note": "give --wave-duration (how long one wave takes, e.g. 45m) to predict which wave starts in which "
        "window",
    }
    assert all(set(w) == {"wave", "domain", "nodes"} for w in result["waves"])


def test_without_windows_the_flag_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-07-10T12:00:00Z")
    plain = run(tmp_path, capsys, ONE_BY_ONE)
    assert "WAVES IN WINDOWS" not in plain and "WINDOWS:" not in plain
    assert run(tmp_path, capsys, ONE_BY_ONE, "--wave-duration", "45m") == plain
    as_json = json.loads(run(tmp_path, capsys, ONE_BY_ONE, "--wave-duration", "45m", "-o", "json"))
    assert as_json == json.loads(run(tmp_path, capsys, ONE_BY_ONE, "-o", "json"))
    assert as_json["summary"]["wave_windows"] is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("3x", 'must be hours and/or minutes like "4h", "90m" or "1h30m", got \'3x\''),
        ("45", 'must be hours and/or minutes like "4h", "90m" or "1h30m", got \'45\''),
        ("", 'must be hours and/or minutes like "4h", "90m" or "1h30m", got \'\''),
        ("0m", "must be longer than 0, got '0m'"),
        ("169h", "must be at most 7 days (168h), got '169h'"),
    ],
)
def test_a_bad_wave_duration_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, why: str
) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump({"maintenanceWindows": [NIGHTLY]}))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--dry-run", "--from-file", str(tmp_path / "absent.json"), "--policy", str(policy_file),
              "--wave-duration", value])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"upgrader: error: argument --wave-duration: {why}\n")


def test_json_carries_each_wave_s_start_end_window_and_overrun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-07-10T22:30:00Z")  # 00:30 CEST: open, closes 02:00 CEST
    policy = {**ONE_BY_ONE, "failureDomains": {"soakSeconds": 900}, "maintenanceWindows": [NIGHTLY],
              "alertGate": {"prometheusURL": "http://prometheus:9090", "alerts": ["GPUDown"]}}
    result = json.loads(run(tmp_path, capsys, policy, "--wave-duration", "30m", "-o", "json"))
    assert result["summary"]["wave_windows"] == {
        "wave_duration_seconds": 1800, "predicted": True, "never_opens_after": None,
        "note": "one wave takes 30m (--wave-duration, an estimate), soak 900s between domains; the alert gate "
        "can delay starts further (plan does not ask Prometheus)",
    }
    common = {"window": "nightly", "window_closes_at": "2026-07-11T00:00:00Z"}
    assert result["waves"] == [
        {"wave": 1, "domain": "us-east-1a", "nodes": ["gpu-a-01"], "starts_at": "2026-07-10T22:30:00Z",
         "ends_at": "2026-07-10T23:00:00Z", "starts_local": "2026-07-11 00:30 CEST", "past_close_seconds": 0,
         **common},
        {"wave": 2, "domain": "us-east-1a", "nodes": ["gpu-a-02"], "starts_at": "2026-07-10T23:00:00Z",
         "ends_at": "2026-07-10T23:30:00Z", "starts_local": "2026-07-11 01:00 CEST", "past_close_seconds": 0,
         **common},
        {"wave": 3, "domain": "us-east-1b", "nodes": ["gpu-b-01"], "starts_at": "2026-07-10T23:45:00Z",
         "ends_at": "2026-07-11T00:15:00Z", "starts_local": "2026-07-11 01:45 CEST", "past_close_seconds": 900,
         **common},
        {"wave": 4, "domain": "us-east-1c", "nodes": ["gpu-c-01"], "starts_at": "2026-07-11T20:00:00Z",
         "ends_at": "2026-07-11T20:30:00Z", "starts_local": "2026-07-11 22:00 CEST", "past_close_seconds": 0,
         "window": "nightly", "window_closes_at": "2026-07-12T00:00:00Z"},
    ]


def test_the_wave_in_progress_waits_for_no_window_and_the_next_waits_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mocker: MockerFixture
) -> None:
    at(mocker, "2026-07-10T23:30:00Z")  # 01:30 CEST: nightly closes at 02:00

    def draining(cluster: EmulatedCluster) -> None:
        cluster.store.patch(cluster.type("nodes"), None, "gpu-a-01", "application/merge-patch+json",
                            {"metadata": {"labels": {STATE_LABEL: "drain-required"}}})

    policy = {**ONE_BY_ONE, "maintenanceWindows": [NIGHTLY]}
    assert block(run(tmp_path, capsys, policy, "--wave-duration", "20m", craft=draining)) == [
        "WAVES IN WINDOWS: one wave takes 20m (--wave-duration, an estimate), soak 0s between domains",
        "  IN PROGRESS (us-east-1a)  started already, ends by 2026-07-11 01:50 CEST",
        "  WAVE 1 (us-east-1a)       starts 2026-07-11 01:50 CEST in nightly, ends 2026-07-11 02:10 CEST, "
        "10m past its close at 2026-07-11 02:00 CEST",
        "  WAVE 2 (us-east-1b)       starts 2026-07-11 22:00 CEST in nightly, ends 2026-07-11 22:20 CEST",
        "  WAVE 3 (us-east-1c)       starts 2026-07-11 22:20 CEST in nightly, ends 2026-07-11 22:40 CEST",
    ]


# ----- the walk, as a property ------------------------------------------------------------------------

CRONS = ["0 22 * * *", "30 2 * * *", "0 2 * * *", "0 6 * * 6,0", "15 */6 * * *", "0 0 1 * *", "45 23 * * 1-4"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]
WINDOWS = st.lists(
    st.builds(
        Window,
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(CRONS),
        st.integers(1, 12 * 4).map(lambda q: q * 15 * M),
        st.sampled_from(ZONES),
    ),
    min_size=1,
    max_size=3,
)
NOW = st.integers(int(parse_rfc3339("2026-01-01T00:00:00Z")), int(parse_rfc3339("2027-12-31T00:00:00Z")))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    windows=WINDOWS,
    domains=st.lists(st.sampled_from(["x", "y", "z"]), min_size=1, max_size=8),
    in_progress=st.booleans(),
    soak=st.sampled_from([0, 60, 600, 3 * H]),
    duration=st.integers(1, 6 * 12).map(lambda q: q * 5 * M),
    now=NOW,
)
def test_every_predicted_start_is_in_an_open_window_and_the_earliest_one(
    windows: list[Window], domains: list[str], in_progress: bool, soak: int, duration: int, now: int
) -> None:
    waves = [(i + (0 if in_progress else 1), d) for i, d in enumerate(domains)]
    result = predict(waves, windows, soak, now, duration)
    assert [(s.wave, s.domain) for s in result.slots] == waves
    ready, previous = float(now), None
    for slot in result.slots:
        if previous is not None and slot.domain != previous:
            ready += soak
        previous = slot.domain
        if slot.wave == 0:
            assert (slot.starts_at, slot.ends_at) == (None, now + duration)
            ready = now + duration
            continue
        assert slot.starts_at is not None and slot.ends_at is not None  # every 5-field schedule fires again
        here = verdict(windows, slot.starts_at)
        assert here.open and here.window == slot.window and here.closes_at == slot.closes_at
        assert slot.starts_at >= ready  # after the wave before it (and the soak across domains)
        if slot.starts_at > ready:  # it waited: no window was open from `ready` until its start
            assert not verdict(windows, ready).open and verdict(windows, slot.starts_at - 1).open is False
        assert slot.ends_at == slot.starts_at + duration
        overrun = 0 if slot.closes_at is None else max(0, slot.ends_at - slot.closes_at)
        assert slot.past_close == overrun
        ready = slot.ends_at
    starts = [s.starts_at for s in result.slots if s.starts_at is not None]
    assert starts == sorted(starts)
