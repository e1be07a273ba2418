"""NVIDIA's toolkit-driver table (core/compat/cuda_releases.py) and the boundary it draws between backward and
minor-version compatibility, at the driver just below and exactly at each release's toolkit driver."""

from __future__ import annotations

import itertools

import pytest

from upgrader.core.compat.cuda import WINDOWS, check
from upgrader.core.compat.cuda_releases import _ROWS, GA, NEWEST, RELEASES, lookup, siblings

# Written out again from the release notes' Table 3 (not read from the module), so a typo in either
# copy fails here: (workload's CUDA, the driver NVIDIA lists, the driver one step below it).
BOUNDARIES = [
    ("11.0", "450.51.05", "450.51.04"),  # 11.0 GA is 11.0.2; 11.0.1 was the RC
    ("11.0.3", "450.51.06", "450.51.05"),
    ("11.2", "460.27.03", "460.27.02"),
    ("11.4", "470.42.01", "470.42.00"),
    ("11.4.3", "470.82.01", "470.82.00"),
    ("11.7.1", "515.48.07", "515.48.06"),
    ("11.8", "520.61.05", "520.61.04"),
    ("12.0", "525.60.13", "525.60.12"),
    ("12.0.1", "525.85.12", "525.85.11"),
    ("12.2", "535.54.03", "535.54.02"),
    ("12.2.2", "535.104.05", "535.104.04"),
    ("12.4", "550.54.14", "550.54.13"),
    ("12.4.1", "550.54.15", "550.54.14"),
    ("12.6.2", "560.35.03", "560.35.02"),
    ("12.8", "570.26", "570.25"),
    ("12.9.1", "575.57.08", "575.57.07"),
    ("13.0", "580.65.06", "580.65.05"),
    ("13.0.2", "580.95.05", "580.95.04"),
    ("13.1", "590.44.01", "590.44.00"),
    ("13.2.1", "595.58.03", "595.58.02"),
    ("13.3", "610.43.02", "610.43.01"),
    ("13.4", "615", "614.99.99"),  # 13.4 GA (13.4.1): the notes name branch R615
    ("13.4.2", "615", "614.99.99"),
]


@pytest.mark.parametrize(("cuda", "toolkit", "below"), BOUNDARIES)
def test_at_the_toolkit_driver_is_backward_and_just_below_is_minor_version(cuda: str, toolkit: str, below: str) -> None:
    for ptx_jit in (False, True):
        at = check(toolkit, cuda, ptx_jit=ptx_jit)
        assert (at.admitted, at.path) == (True, "backward"), at
        assert f"driver {toolkit} >= " in at.reason
    under = check(below, cuda)
    assert (under.admitted, under.path) == (True, "minor-version"), under
    refused = check(below, cuda, ptx_jit=True)
    assert not refused.admitted
    assert "PTX JIT is not covered by minor-version compatibility" in refused.reason
    assert "move the node to a driver >= " in refused.reason


@pytest.mark.parametrize("cuda", ["13.5", "13.4.0", "12.3.2", "11.9", "12.7", "13.0.3"])
def test_releases_the_table_lacks_are_refused_with_and_without_ptx_jit(cuda: str) -> None:
    """13.5: no copy of its driver section was found; 13.4.0: a developer preview; 12.3.2 and 13.0.3:
    builds NVIDIA's table has no row for; 11.9 and 12.7: never released."""
    for ptx_jit in (False, True):
        verdict = check("999.99.99", cuda, ptx_jit=ptx_jit)
        assert not verdict.admitted
        assert f"CUDA {cuda} is not in the toolkit-driver table" in verdict.reason
        assert f"--floor {cuda}=DRIVER" in verdict.reason


def test_rows_are_newest_first_and_a_newer_release_never_needs_an_older_driver() -> None:
    versions = [RELEASES[tuple(int(p) for p in v.split("."))] for v, _, _ in _ROWS]
    assert [r.version for r in versions] == sorted((r.version for r in versions), reverse=True)
    assert len(RELEASES) == len(_ROWS)
    oldest_first = versions[::-1]
    for older, newer in itertools.pairwise(oldest_first):
        assert newer.driver >= older.driver, (older, newer)
    assert versions[0] == NEWEST


def test_every_toolkit_driver_sits_in_its_majors_window() -> None:
    """At or above the minor-version floor, below the upper bound: so every driver at or above the
    upper bound is backward compatible with the whole major, as docs/compatibility.md#the-three-paths says."""
    for release in RELEASES.values():
        floor, upper = WINDOWS[release.version[0]]
        assert release.driver >= floor, release
        assert upper is None or release.driver < upper, release


def test_each_minor_has_one_ga_and_it_is_what_x_y_means() -> None:
    minors = {r.version[:2] for r in RELEASES.values()}
    assert set(GA) == minors
    for minor, ga in GA.items():
        assert ga.is_ga and sum(r.is_ga for r in siblings(minor)) == 1
        assert lookup(minor) is ga
    assert GA[(11, 0)].version == (11, 0, 2) and GA[(13, 4)].version == (13, 4, 1)
    assert lookup((12, 4, 127)) is None and lookup((12,)) is None


def test_labels_show_the_number_where_the_name_lacks_it() -> None:
    assert RELEASES[(11, 0, 2)].label == "CUDA 11.0.2 GA"
    assert RELEASES[(12, 4, 1)].label == "CUDA 12.4 Update 1 (12.4.1)"
    assert RELEASES[(13, 4, 1)].label == "CUDA 13.4 GA (13.4.1)"
    assert RELEASES[(13, 4, 1)].what == "the driver branch NVIDIA names for CUDA 13.4 GA (13.4.1)"
    assert RELEASES[(12, 2, 0)].driver_text == "535.54.03"  # NVIDIA's zero padding is kept for messages
