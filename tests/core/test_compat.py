"""Driver / CUDA compatibility (docs/compatibility.md): the three paths, their boundaries, and failing closed.

Windows (CUDA major: floor, upper bound): 11: 450-525, 12: 525-580, 13: 580-none. Backward
compatibility at or above the toolkit driver of the workload's release (PTX JIT fine); minor-version
compatibility from the floor up to it (no PTX JIT); forward compatibility below the floor (cuda-compat
package, eligible hardware, host branch >= 450). Unknown majors, releases the table lacks and malformed
input are refusals. The table itself: tests/core/test_cuda_releases.py; parse_version and parse_floors:
test_compat_parsing.py; workload and affinity verdicts: test_compat_verdicts.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upgrader.core.compat.cuda import (
    FORWARD_COMPAT_MIN,
    WINDOWS,
    Floors,
    Verdict,
    check,
    parse_floors,
    parse_version,
)
from upgrader.core.compat.cuda_releases import RELEASES, ToolkitRelease, lookup

from .compat_fixtures import PINNED, one_line

PATHS = {"backward", "minor-version", "forward-compat"}
FC: dict[str, Any] = {
    "forward_compat": True,
    "fc_eligible": True,
}  # both forward-compatibility conditions a pod/node set


# ----- check: the three paths and their boundaries ----------------------------------------------------

# (driver, cuda, keywords, path or None for a refusal, words the reason must contain)
CASES: list[tuple[str, str, dict[str, Any], str | None, tuple[str, ...]]] = [
    # backward compatibility: D at or above the toolkit driver of the release; PTX JIT is fine
    ("550.90.07", "11.8", {}, "backward", ("driver 550.90.07 >= 520.61.05", "toolkit driver of CUDA 11.8 GA")),
    ("525", "11.0", {}, "backward", ("driver 525 >= 450.51.05", "CUDA 11.0.2 GA")),  # 11.0 GA is 11.0.2
    ("525.0.0", "11.4", {}, "backward", ()),
    ("525.60.13", "11.8", {"ptx_jit": True}, "backward", ()),
    ("580", "12.4", {"ptx_jit": True}, "backward", ("driver 580 >= 550.54.14", "CUDA 12.4 GA (12.4.0)")),
    ("535.104.05", "12.2", {"ptx_jit": True}, "backward", ("535.104.05 >= 535.54.03",)),
    ("579.99", "12.8", {"ptx_jit": True, **FC}, "backward", ("579.99 >= 570.26",)),
    ("580.65.06", "13.0", {}, "backward", ("580.65.06 >= 580.65.06", "CUDA 13.0 GA")),
    ("999.1", "11.8", {"ptx_jit": True}, "backward", ()),
    ("999.99", "13.2", {"ptx_jit": True}, "backward", ()),
    ("550.90.07", "012.4", {}, "backward", ("CUDA 12.4 GA",)),  # leading zeros are still 12.4
    # minor-version compatibility: floor <= D < the toolkit driver, SASS only
    ("450", "11.0", {}, "minor-version", ("at or above 450, the floor of the CUDA 11 window", "below 450.51.05")),
    ("450.0", "11.0", {}, "minor-version", ()),
    ("450.36.06", "11.0", {}, "minor-version", ()),
    ("520.61.04", "11.8", {}, "minor-version", ("below 520.61.05, the toolkit driver of CUDA 11.8 GA",)),
    ("525", "12.0", {}, "minor-version", ("at or above 525, the floor of the CUDA 12 window",)),  # at floor
    ("535.104.05", "12.4", {}, "minor-version", ()),
    ("535.104.05", "12.4", {**FC}, "minor-version", ()),  # cuda-compat does not matter here
    ("580", "13.0", {}, "minor-version", ("at or above 580", "below 580.65.06, the toolkit driver of CUDA 13.0 GA")),
    # ... and PTX JIT is not covered by it
    ("450", "11.0", {"ptx_jit": True}, None, ("PTX JIT is not covered by minor-version compatibility",)),
    ("535.183.06", "12.4", {"ptx_jit": True}, None, ("PTX JIT is not covered", "driver >= 550.54.14")),
    ("570.25.99", "12.8", {"ptx_jit": True, **FC}, None, ("PTX JIT is not covered", "below 570.26")),
    ("580", "13.0", {"ptx_jit": True}, None, ("PTX JIT is not covered", "ship SASS")),
    ("579.99", "13.0", {}, None, ("below 580, the floor of the CUDA 13 window",)),
    ("570.1", "13.0", {**FC, "ptx_jit": True}, "forward-compat", ("below 580",)),
    # forward compatibility: D below the floor, with all three conditions
    ("470.57.02", "12.2", {**FC}, "forward-compat", ("driver 470.57.02 is below 525",)),
    ("524.99.99", "12.0", {**FC}, "forward-compat", ()),  # one patch below the floor
    ("450", "12.0", {**FC}, "forward-compat", ()),  # exactly the cuda-compat minimum
    ("450.0.0", "12.0", {**FC}, "forward-compat", ()),
    ("470.57.02", "12.2", {**FC, "ptx_jit": True}, "forward-compat", ()),  # cuda-compat has its PTX JIT
    # ... each condition missing
    ("470.57.02", "12.2", {"fc_eligible": True}, None, ("cuda-compat package",)),
    ("470.57.02", "12.2", {"forward_compat": True}, None, ("hardware eligible",)),
    ("449.99.99", "12.2", {**FC}, None, ("host branch >= 450",)),
    ("440.33", "12.2", {**FC}, None, ("driver 440.33 is below 525", "host branch >= 450")),
    ("440.33", "11.8", {**FC}, None, ("host branch >= 450",)),  # below CUDA 11's floor is below 450
    ("0", "12.0", {**FC}, None, ("host branch >= 450",)),
    (
        "470",
        "12.0",
        {},
        None,
        ("cuda-compat package", "hardware eligible", "move the node to a driver >= 525"),
    ),
    ("440", "12.0", {}, None, ("cuda-compat package", "hardware eligible", "host branch >= 450")),
    # truthy non-True values do not grant forward compatibility (fail closed)
    ("470", "12.0", {"forward_compat": "false", "fc_eligible": True}, None, ("cuda-compat package",)),
    ("470", "12.0", {"forward_compat": True, "fc_eligible": 1}, None, ("hardware eligible",)),
    # pinned floors: (525, 60, 13) for CUDA 12
    ("525.60.11", "12.0", {"floors": PINNED}, None, ("below 525.60.13, the pinned floor of the CUDA 12",)),
    ("525.60.12", "12.0", {"floors": PINNED}, None, ()),  # one patch below the pinned floor
    ("525.60.11", "12.0", {"floors": PINNED, **FC}, "forward-compat", ("below 525.60.13",)),
    ("525.60.13", "12.1", {"floors": PINNED}, "minor-version", ("at or above 525.60.13, the pinned floor",)),
    ("525.61", "12.1", {"floors": PINNED}, "minor-version", ()),
    ("525", "12.1", {"floors": PINNED}, None, ("below 525.60.13",)),  # plain "525" is 525.0.0
    ("525.60", "12.1", {"floors": PINNED}, None, ()),  # 525.60 is 525.60.0
    ("525.60.13", "12.0", {"floors": PINNED}, "backward", ()),  # the toolkit driver of 12.0 GA itself
    # prefixes: the shorter tuple is padded with zeros, so 525.60 == 525.60.0 and 525 == 525.0.0
    ("525.60", "12.1", {"floors": {12: (525, 60, 0)}}, "minor-version", ("at or above 525.60.0",)),
    ("525", "12.1", {"floors": {12: (525, 0, 0)}}, "minor-version", ()),
    ("450", "12.0", {"floors": {12: (525, 0)}}, None, ("below 525, the floor",)),  # not a raise
    ("530.30.02", "12.1", {"floors": PINNED, "ptx_jit": True}, "backward", ()),  # toolkit drivers unchanged
    ("450.1", "11.0", {"floors": PINNED}, "minor-version", ()),  # pins only its own major
    ("510", "12.0", {"floors": {12: (500,)}}, None, ("below 525, the floor",)),  # pins never lower
    ("525", "12.0", {"floors": {12: (500,)}}, "minor-version", ()),
    ("525.60.11", "12.0", {"floors": {}}, "minor-version", ()),
    ("525.60.11", "12.0", {"floors": None}, "minor-version", ()),
    # malformed pinned floors
    ("535", "12.0", {"floors": {12: "525.60.13"}}, None, ("pinned floor for CUDA 12 is not a version",)),
    ("535", "12.0", {"floors": {12: ()}}, None, ("not a version tuple",)),
    ("535", "12.0", {"floors": {12: (525, -1)}}, None, ("not a version tuple",)),
    ("535", "12.0", {"floors": {12: (True,)}}, None, ("not a version tuple",)),
    ("535", "12.0", {"floors": ["12=525"]}, None, ("pinned floors are not a mapping",)),
    ("535", "12.4", {"floors": {(12, 4): "550"}}, None, ("pinned floor for CUDA 12.4 is not a version",)),
    # unknown CUDA majors have no rule
    ("550.90.07", "10.2", {}, None, ("no compatibility rule recorded for CUDA 10",)),
    ("550.90.07", "14.0", {}, None, ("no compatibility rule recorded for CUDA 14",)),
    ("550.90.07", "14.0", {**FC}, None, ("no compatibility rule recorded for CUDA 14",)),
    ("550.90.07", "9.2", {}, None, ("CUDA 9",)),
    ("550.90.07", "0.0", {}, None, ("CUDA 0",)),
    # a release is X.Y or X.Y.Z: a bare major cannot pick a toolkit driver, four parts are a component
    ("999", "13", {}, None, ("cannot read the CUDA version", "'13' is not X.Y or X.Y.Z")),
    ("550", "12.4.127.1", {}, None, ("is not X.Y or X.Y.Z",)),
]


@pytest.mark.parametrize(
    ("driver", "cuda", "keywords", "path", "words"),
    CASES,
    ids=[f"{c[0]}-cuda{c[1]}-{'-'.join(sorted(c[2])) or 'plain'}-{c[3] or 'refused'}" for c in CASES],
)
def test_check(
    driver: str, cuda: str, keywords: dict[str, Any], path: str | None, words: tuple[str, ...]
) -> None:
    verdict = one_line(check(driver, cuda, **keywords))
    assert verdict.admitted is (path is not None)
    assert verdict.path == path
    for word in words:
        assert word in verdict.reason


def test_reasons_read_as_documented() -> None:
    """docs/compatibility.md's own example, as its opening shows it: 550.90.07 admits a CUDA 12.4 PTX
    workload, 535.183.06 does not."""
    assert check("550.90.07", "12.4", ptx_jit=True) == Verdict(
        True,
        "backward",
        "backward compatibility (driver 550.90.07 >= 550.54.14, the toolkit driver of CUDA 12.4 GA (12.4.0))",
    )
    assert check("535.183.06", "12.4", ptx_jit=True) == Verdict(
        False,
        None,
        "driver 535.183.06 is at or above 525, the floor of the CUDA 12 window, and below 550.54.14, the toolkit "
        "driver of CUDA 12.4 GA (12.4.0), but PTX JIT is not covered by minor-version compatibility: move the "
        "node to a driver >= 550.54.14 or ship SASS for the target GPUs",
    )


@pytest.mark.parametrize(
    ("keywords", "named", "not_named"),
    [
        ({"fc_eligible": True}, ["cuda-compat package"], ["hardware eligible", "host branch"]),
        ({"forward_compat": True}, ["hardware eligible"], ["cuda-compat package in", "host branch"]),
        ({}, ["cuda-compat package", "hardware eligible"], ["host branch"]),
    ],
)
def test_forward_compat_refusal_names_exactly_the_missing_conditions(
    keywords: dict[str, Any], named: list[str], not_named: list[str]
) -> None:
    reason = check("470.57.02", "12.2", **keywords).reason
    assert all(n in reason for n in named), reason
    assert not any(n in reason for n in not_named), reason


def test_branch_440_with_compat_package_names_only_the_branch() -> None:
    reason = check("440.33", "12.2", forward_compat=True, fc_eligible=True).reason
    assert "host branch >= 450" in reason
    assert "cuda-compat package in" not in reason and "hardware eligible" not in reason
    assert "provide what" not in reason  # nothing the workload can add fixes the branch


MALFORMED = [
    "",
    "abc",
    "525..1",
    "-1",
    "5.a",
    "None",
    " 525.60.13",
    "525.60.13 ",
    "525\n",
    "\t",
    "525.",
    "1_000",
    "\u0665\u0662\u0665",
    "x" * 500,
    None,
    525,
    525.6,
]


@pytest.mark.parametrize("driver", MALFORMED, ids=repr)
def test_malformed_driver_is_a_refusal_naming_the_driver(driver: Any) -> None:
    verdict = one_line(check(driver, "12.4", **FC))
    assert (verdict.admitted, verdict.path) == (False, None)
    assert verdict.reason.startswith("cannot read the driver version: ")
    assert len(verdict.reason) < 200  # a 500-character input is cut short


@pytest.mark.parametrize("cuda", [*MALFORMED, "twelve", "12.x"], ids=repr)
def test_malformed_cuda_is_a_refusal_naming_the_cuda_version(cuda: Any) -> None:
    verdict = one_line(check("550.90.07", cuda, **FC))
    assert (verdict.admitted, verdict.path) == (False, None)
    assert verdict.reason.startswith("cannot read the CUDA version: ")


def test_both_malformed_are_both_named() -> None:
    reason = check("abc", "twelve").reason
    assert "driver version" in reason and "'abc'" in reason
    assert "CUDA version" in reason and "'twelve'" in reason


def test_a_verdict_cannot_carry_a_path_on_a_refusal_or_an_unknown_path() -> None:
    with pytest.raises(ValueError):
        Verdict(False, "backward", "x")
    with pytest.raises(ValueError):
        Verdict(True, "sideways", "x")


# ----- properties -------------------------------------------------------------------------------------

VERSIONISH = st.text(alphabet="0123456789.-+ ax\n\u0665", max_size=14)
FLOORS = st.one_of(
    st.none(),
    st.dictionaries(
        st.integers(min_value=9, max_value=15),
        st.tuples(st.integers(min_value=0, max_value=700), st.integers(min_value=0, max_value=200)),
        max_size=3,
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    driver=st.one_of(st.text(), VERSIONISH),
    cuda=st.one_of(st.text(), VERSIONISH),
    ptx_jit=st.booleans(),
    forward_compat=st.booleans(),
    fc_eligible=st.booleans(),
    floors=FLOORS,
)
def test_check_never_raises_and_admissions_carry_a_path(
    driver: str,
    cuda: str,
    ptx_jit: bool,
    forward_compat: bool,
    fc_eligible: bool,
    floors: Floors | None,
) -> None:
    verdict = one_line(
        check(
            driver,
            cuda,
            ptx_jit=ptx_jit,
            forward_compat=forward_compat,
            fc_eligible=fc_eligible,
            floors=floors,
        )
    )
    if verdict.admitted:
        assert verdict.path in PATHS
        assert verdict.path != "minor-version" or not ptx_jit
        assert verdict.path != "forward-compat" or (forward_compat and fc_eligible)
    else:
        assert verdict.path is None


@settings(max_examples=400, deadline=None)
@given(
    driver=st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=3),
    release=st.sampled_from(sorted(RELEASES.values(), key=lambda r: r.version)),
    short=st.booleans(),
    ptx_jit=st.booleans(),
)
def test_path_follows_the_integer_tuple_order(
    driver: list[int], release: ToolkitRelease, short: bool, ptx_jit: bool
) -> None:
    """For every listed release: backward at or above its toolkit driver, minor-version from the
    major's floor up to it (not with PTX JIT), forward compatibility below the floor."""
    version = tuple(driver)
    text = ".".join(map(str, version))
    assert parse_version(text) == version
    named = release.version[:2] if short and release.is_ga else release.version
    toolkit = lookup(named)
    assert toolkit is not None
    verdict = check(text, ".".join(map(str, named)), ptx_jit=ptx_jit, forward_compat=True, fc_eligible=True)
    floor, _ = WINDOWS[release.version[0]]
    padded = version + (0,) * (3 - len(version))
    if padded >= toolkit.driver + (0,) * (3 - len(toolkit.driver)):
        assert verdict.path == "backward"
    elif padded >= (*floor, 0, 0):
        assert verdict.path == (None if ptx_jit else "minor-version")
    elif padded >= (*FORWARD_COMPAT_MIN, 0, 0):
        assert verdict.path == "forward-compat"
    else:
        assert not verdict.admitted


@pytest.mark.parametrize("cuda", ["13.99", "12.4.127", "11.9", "13.0.3"])
def test_a_release_the_table_lacks_is_refused_saying_how_to_pin_it(cuda: str) -> None:
    verdict = one_line(check("999.99.99", cuda, ptx_jit=False))
    assert not verdict.admitted
    assert f"CUDA {cuda} is not in the toolkit-driver table" in verdict.reason
    assert "the table needs that release" in verdict.reason
    assert f"--floor {cuda}=DRIVER" in verdict.reason


def test_an_unknown_update_names_the_releases_of_its_minor() -> None:
    reason = check("560", "12.4.127").reason
    assert "(the table lists CUDA 12.4 GA (12.4.0) and CUDA 12.4 Update 1 (12.4.1) of 12.4)" in reason


def test_a_pinned_release_is_judged_by_its_pin() -> None:
    floors = parse_floors(["13.99=612.01.02"])
    assert check("612.1.2", "13.99", ptx_jit=True, floors=floors) == Verdict(
        True, "backward", "backward compatibility (driver 612.1.2 >= 612.1.2, the pinned toolkit driver of CUDA 13.99)"
    )
    below = check("612.1.1", "13.99", ptx_jit=True, floors=floors)
    assert not below.admitted and "below 612.1.2, the pinned toolkit driver of CUDA 13.99" in below.reason
    assert check("612.1.1", "13.99", floors=floors).path == "minor-version"
    # an X.Y pin covers that minor's updates too, and only ever raises NVIDIA's value
    raised = parse_floors(["12.4=551"])
    assert check("550.54.15", "12.4.1", ptx_jit=True, floors=raised).reason.endswith(
        "move the node to a driver >= 551 or ship SASS for the target GPUs"
    )
    assert check("551", "12.4.1", ptx_jit=True, floors=raised).path == "backward"
    assert check("550.54.15", "12.4.1", ptx_jit=True, floors={(12, 4): (550,)}).path == "backward"
