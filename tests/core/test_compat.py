"""Driver / CUDA compatibility (DOMAIN.md §5): the three paths, their boundaries, and failing closed.

Windows (CUDA major: floor, upper bound): 11: 450-525, 12: 525-580, 13: 580-none. Backward
compatibility at or above the toolkit driver of the workload's release (PTX JIT fine); minor-version
compatibility from the floor up to it (no PTX JIT); forward compatibility below the floor (cuda-compat
package, eligible hardware, host branch >= 450). Unknown majors, releases the table lacks and malformed
input are refusals. The table itself: tests/core/test_cuda_releases.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upgrader.core.compat import (
    FORWARD_COMPAT_MIN,
    WINDOWS,
    Floors,
    Verdict,
    affinity_verdict,
    check,
    parse_floors,
    parse_version,
    workload_verdict,
)
from upgrader.core.cuda_releases import RELEASES, ToolkitRelease, lookup
from upgrader.core.views import pod_view

PATHS = {"backward", "minor-version", "forward-compat"}
FC: dict[str, Any] = {
    "forward_compat": True,
    "fc_eligible": True,
}  # both forward-compatibility conditions a pod/node set
PINNED: Floors = {12: (525, 60, 13)}  # "older CUDA 12 notes said >= 525.60.13" (DOMAIN.md §5)


def one_line(verdict: Verdict) -> Verdict:
    """Every verdict carries one non-empty line of reason, and a path exactly on admissions by check."""
    assert verdict.reason and "\n" not in verdict.reason, verdict
    return verdict


# ----- the recorded rules -----------------------------------------------------------------------------


def test_windows_and_forward_compat_minimum_are_the_documented_ones() -> None:
    assert dict(WINDOWS) == {11: ((450,), (525,)), 12: ((525,), (580,)), 13: ((580,), None)}
    assert FORWARD_COMPAT_MIN == (450,)


# ----- parse_version ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("525.60.13", (525, 60, 13)),
        ("12.4", (12, 4)),
        ("12", (12,)),
        ("550.90.07", (550, 90, 7)),  # NVIDIA's zero-padded patch level
        ("0", (0,)),
        ("535.104.05", (535, 104, 5)),
        ("1.2.3.4", (1, 2, 3, 4)),
        ("999999999", (999999999,)),
    ],
)
def test_parse_version_reads_dotted_integers(text: str, expected: tuple[int, ...]) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("abc", "'abc' is not a non-negative integer"),
        ("525..1", "empty component"),
        ("525.", "empty component"),
        (".525", "empty component"),
        ("-1", "'-1' is not a non-negative integer"),
        ("+1", "'+1' is not a non-negative integer"),
        ("5.a", "'a' is not a non-negative integer"),
        ("None", "'None' is not a non-negative integer"),
        ("null", "'null' is not a non-negative integer"),
        ("1_000", "'1_000' is not a non-negative integer"),  # int() would accept it
        ("\u0665\u0662\u0665", "is not a non-negative integer"),  # Arabic-Indic digits: int() would too
        ("5e2", "'5e2' is not a non-negative integer"),
        ("525,60", "is not a non-negative integer"),
        ("12.4-rc1", "'4-rc1' is not a non-negative integer"),
        ("1234567890", "1-9 digits"),
        ("9" * 100, "longer than 64 characters"),
        (" 525.60.13", "whitespace"),
        ("525.60.13\n", "whitespace"),
        ("525 .60", "whitespace"),
        ("\t", "whitespace"),
        ("   ", "whitespace"),
        ("12.\u00a04", "whitespace"),
    ],
)
def test_parse_version_rejects_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_version(text)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value", [None, 525, 525.6, b"525", ["525"]])
def test_parse_version_rejects_non_text_with_a_value_error(value: Any) -> None:
    with pytest.raises(ValueError, match=r"expected a version such as 525\.60\.13"):
        parse_version(value)


# ----- parse_floors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([], {}),
        (["12=525.60.13"], {12: (525, 60, 13)}),
        (["11=470.57.02", "12=525.60.13"], {11: (470, 57, 2), 12: (525, 60, 13)}),
        (["12=525"], {12: (525,)}),  # exactly the documented floor
        (["12=579.99"], {12: (579, 99)}),  # just below the upper bound
        (["13=600.1"], {13: (600, 1)}),  # CUDA 13 has no upper bound to stay below
        (["12=525.60.13", "12=525.60.13"], {12: (525, 60, 13)}),  # repeated, same value
        (("12=530" for _ in range(1)), {12: (530,)}),  # any iterable
        (["13.99=612.01"], {(13, 99): (612, 1)}),  # a release the table lacks: its toolkit driver
        (["13.0.9=580.100"], {(13, 0, 9): (580, 100)}),
        (["12.4=550.54.14"], {(12, 4): (550, 54, 14)}),  # a listed release: at NVIDIA's value ...
        (["12.4=560"], {(12, 4): (560,)}),  # ... or raising it
        (["12=530", "12.4=560"], {12: (530,), (12, 4): (560,)}),
    ],
)
def test_parse_floors(items: Any, expected: dict[Any, tuple[int, ...]]) -> None:
    assert parse_floors(items) == expected


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["12"], "floor '12' is not MAJOR=VERSION"),
        (["12=525=1"], "floor '12=525=1' is not MAJOR=VERSION"),
        (["12:525"], "floor '12:525' is not MAJOR=VERSION"),
        (["=525"], "floor '=525': '' is not a CUDA major or a release X.Y[.Z]"),
        (["twelve=525"], "'twelve' is not a CUDA major or a release"),
        (["-12=525"], "'-12' is not a CUDA major or a release"),
        (["12 =525"], "'12 ' is not a CUDA major or a release"),
        (["12.4.127.1=560"], "'12.4.127.1' is not a CUDA major or a release X.Y[.Z]"),
        (["12.4=550.54.13"], "below 550.54.14, the toolkit driver of CUDA 12.4 GA (12.4.0); a pinned"),
        (["12.4.1=550.54.14"], "below 550.54.15, the toolkit driver of CUDA 12.4 Update 1"),
        (["12.10=580"], "floor '12.10=580' is not below 580, the upper bound of the CUDA 12 window"),
        (["13.99=579"], "below 580, the documented floor of the CUDA 13 window"),
        (["14.1=600"], "no compatibility rule recorded for CUDA 14"),
        (["13.99=600", "13.99=601"], "floor '13.99=601': CUDA 13.99 already has floor 600"),
        (["12="], "floor '12=': the version is empty"),
        (["12=abc"], "floor '12=abc': version 'abc' is not a non-negative integer"),
        (["12=525..13"], "floor '12=525..13': version '525..13' has an empty component"),
        (["12= 525"], "contains whitespace"),
        (["14=600"], "floor '14=600': no compatibility rule recorded for CUDA 14"),
        (["10=400"], "no compatibility rule recorded for CUDA 10"),
        (["12=524.99"], "below 525, the documented floor of the CUDA 12 window"),
        (["12=500"], "a pinned floor may only raise it"),
        (["12=580"], "floor '12=580' is not below 580, the upper bound of the CUDA 12 window"),
        (["11=525.1"], "not below 525, the upper bound of the CUDA 11 window"),
        (["12=525.60.13", "12=526"], "floor '12=526': CUDA 12 already has floor 525.60.13"),
        (["12=525.60.13", "bad"], "floor 'bad'"),
        ("12=525.60.13", "got the single string"),
        ([None], "floor None is not MAJOR=VERSION"),
    ],
)
def test_parse_floors_names_the_bad_item(items: Any, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_floors(items)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


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
    """DOMAIN.md §5's own example, word for word: 550.90.07 admits a CUDA 12.4 PTX workload, 535.183.06 does not."""
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


# ----- workload_verdict -------------------------------------------------------------------------------

RUNTIME, PTX, FWD = (
    "gpu-upgrader.io/cuda-runtime",
    "gpu-upgrader.io/ptx-jit",
    "gpu-upgrader.io/forward-compat",
)
ELIGIBLE_KEY = "gpu-upgrader.io/forward-compat-eligible"
ELIGIBLE = {ELIGIBLE_KEY: "true"}

WORKLOADS: list[tuple[dict[str, str], dict[str, str], str, str | None, tuple[str, ...]]] = [
    ({RUNTIME: "12.4"}, {}, "535.104.05", "minor-version", ()),
    ({RUNTIME: "12.4", PTX: "false"}, {}, "535.104.05", "minor-version", ()),
    ({RUNTIME: "12.4", PTX: "true"}, {}, "535.104.05", None, ("PTX JIT is not covered",)),
    ({RUNTIME: "12.4", PTX: "true"}, {}, "580.65.06", "backward", ()),
    ({RUNTIME: "11.8"}, {}, "550.90.07", "backward", ()),
    ({RUNTIME: "12.2", FWD: "true"}, ELIGIBLE, "470.57.02", "forward-compat", ()),
    ({RUNTIME: "12.2", FWD: "true", PTX: "true"}, ELIGIBLE, "470.57.02", "forward-compat", ()),
    ({RUNTIME: "12.2", FWD: "true"}, {}, "470.57.02", None, ("hardware eligible",)),
    ({RUNTIME: "12.2", FWD: "true"}, {ELIGIBLE_KEY: "false"}, "470.57.02", None, ("hardware eligible",)),
    ({RUNTIME: "12.2", FWD: "true"}, {ELIGIBLE_KEY: "True"}, "470", None, ("hardware eligible",)),  # exact
    ({RUNTIME: "12.2", FWD: "true"}, {ELIGIBLE_KEY: "yes"}, "470", None, ("hardware eligible",)),
    ({RUNTIME: "12.2", FWD: "false"}, ELIGIBLE, "470.57.02", None, ("cuda-compat package",)),
    ({RUNTIME: "12.2"}, ELIGIBLE, "470.57.02", None, ("cuda-compat package",)),
    ({RUNTIME: "12.2", FWD: "true"}, ELIGIBLE, "440.33", None, ("host branch >= 450",)),
    ({RUNTIME: "14.0"}, {}, "580.65.06", None, ("no compatibility rule recorded for CUDA 14",)),
    ({RUNTIME: "12.4"}, {}, "abc", None, ("cannot read the driver version",)),
    # malformed annotations: a refusal that names the annotation
    ({RUNTIME: "twelve"}, {}, "535", None, (RUNTIME, "'twelve'")),
    ({RUNTIME: ""}, {}, "535", None, (RUNTIME, "empty")),
    ({RUNTIME: " 12.4"}, {}, "535", None, (RUNTIME, "whitespace")),
    ({RUNTIME: "12.4", PTX: "maybe"}, {}, "580", None, (PTX, "'maybe'")),
    ({RUNTIME: "12.4", PTX: "True"}, {}, "580", None, (PTX, "'True'")),
    ({RUNTIME: "12.4", PTX: ""}, {}, "580", None, (PTX,)),
    ({RUNTIME: "12.2", FWD: "yes"}, ELIGIBLE, "470", None, (FWD, "'yes'")),
    ({RUNTIME: "twelve", PTX: "maybe", FWD: "1"}, {}, "535", None, (RUNTIME, PTX, FWD)),
]


@pytest.mark.parametrize(("annotations", "labels", "driver", "path", "words"), WORKLOADS)
def test_workload_verdict(
    annotations: dict[str, str], labels: dict[str, str], driver: str, path: str | None, words: tuple[str, ...]
) -> None:
    verdict = workload_verdict(annotations, labels, driver)
    assert verdict is not None
    one_line(verdict)
    assert verdict.admitted is (path is not None)
    assert verdict.path == path
    for word in words:
        assert word in verdict.reason, verdict.reason


@pytest.mark.parametrize("annotations", [{}, {PTX: "true", FWD: "true"}, {"other": "12.4"}])
def test_workload_without_a_cuda_runtime_has_no_verdict(annotations: dict[str, str]) -> None:
    assert workload_verdict(annotations, ELIGIBLE, "470") is None


def test_workload_verdict_passes_pinned_floors_on() -> None:
    assert workload_verdict({RUNTIME: "12.0"}, {}, "525.60.11") == check("525.60.11", "12.0")
    pinned = workload_verdict({RUNTIME: "12.0"}, {}, "525.60.11", floors=PINNED)
    assert pinned is not None and not pinned.admitted and "525.60.13" in pinned.reason


def test_workload_verdict_reads_a_pod_view() -> None:
    pod = pod_view(
        {
            "metadata": {"namespace": "ml", "name": "train", "annotations": {RUNTIME: "12.4", PTX: "true"}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": "train:1"}]},
        }
    )
    verdict = workload_verdict(pod.annotations, {}, "535.104.05")
    assert verdict is not None and not verdict.admitted and "PTX JIT" in verdict.reason


# ----- affinity_verdict -------------------------------------------------------------------------------

LABEL = "nvidia.com/cuda.driver.major"


def expr(op: str, *values: str, key: str = LABEL) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


def required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": term} for term in terms]
            }
        }
    }


AFFINITIES: list[tuple[dict[str, Any], str, bool, tuple[str, ...]]] = [
    (required([expr("In", "550")]), "550.90.07", True, (f"{LABEL}=550", "In ['550']")),
    (required([expr("In", "535", "550")]), "550.90.07", True, ()),
    (required([expr("In", "535")]), "550.90.07", False, ("would not satisfy", "In ['535']")),
    (required([expr("In", "0550")]), "550", False, ()),  # label values compare as the scheduler does
    (required([expr("NotIn", "535")]), "550.90.07", True, ()),
    (required([expr("NotIn", "535", "550")]), "550.90.07", False, ("NotIn",)),
    (required([expr("Gt", "535")]), "550.90.07", True, ("Gt 535",)),
    (required([expr("Gt", "550")]), "550.90.07", False, ("Gt 550",)),  # strictly greater
    (required([expr("Gt", "99")]), "100", True, ()),  # integers, not strings: "100" > "99"
    (required([expr("Lt", "560")]), "550.90.07", True, ()),
    (required([expr("Lt", "550")]), "550.90.07", False, ("Lt 550",)),
    (required([expr("Lt", "1000")]), "999", True, ()),
    (required([expr("Gt", "abc")]), "550", False, ("Gt needs exactly one integer value",)),
    (required([expr("Gt", "500", "600")]), "550", False, ("exactly one integer value",)),
    (required([expr("Lt")]), "550", False, ("exactly one integer value",)),
    (required([expr("Exists")]), "550.90.07", True, ("Exists",)),
    (required([expr("DoesNotExist")]), "550.90.07", False, ("DoesNotExist",)),
    (required([expr("Like", "5*")]), "550", False, ("unknown operator 'Like'",)),
    (required([{"key": LABEL, "operator": "In", "values": "550"}]), "550", False, ("unreadable values",)),
    # expressions within a term are ANDed; other labels are not this check's business
    (required([expr("Gt", "530"), expr("Lt", "560")]), "550.90.07", True, ("Gt 530, Lt 560",)),
    (required([expr("Gt", "530"), expr("Lt", "560")]), "570.1", False, ()),
    (required([expr("In", "550"), expr("In", "H100", key="nvidia.com/gpu.product")]), "550", True, ()),
    # terms are ORed
    (required([expr("In", "535")], [expr("In", "550")]), "550.90.07", True, ("term 1",)),
    (required([expr("In", "535")], [expr("In", "550")]), "570.1", False, ("term 0", "term 1")),
    (required([expr("In", "535")], [expr("Exists", key="pool")]), "570.1", True, ("does not constrain",)),
    (required([expr("In", "535")], []), "570.1", True, ("term 1",)),
    # an unreadable driver, once the label matters
    (required([expr("In", "550")]), "abc", False, ("cannot tell", "'abc'")),
    (required([expr("Exists")]), "", False, ("empty",)),
]


@pytest.mark.parametrize(("affinity", "driver", "admitted", "words"), AFFINITIES)
def test_affinity_verdict(
    affinity: dict[str, Any], driver: str, admitted: bool, words: tuple[str, ...]
) -> None:
    verdict = affinity_verdict(affinity, driver)
    assert verdict is not None
    one_line(verdict)
    assert verdict.admitted is admitted
    assert verdict.path is None  # a scheduling answer, not a compatibility path
    for word in words:
        assert word in verdict.reason, verdict.reason


PREFERRED = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [expr("In", "535")]}}
        ]
    }
}


@pytest.mark.parametrize(
    "affinity",
    [
        None,
        {},
        {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}},
        {"nodeAffinity": {}},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
        PREFERRED,  # only required affinity blocks scheduling
        required([expr("In", "H100", key="nvidia.com/gpu.product")]),
        required([], [expr("Exists", key="pool")]),
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
                    ]
                }
            }
        },
    ],
)
def test_affinity_that_does_not_mention_the_label_has_no_verdict(affinity: dict[str, Any] | None) -> None:
    assert affinity_verdict(affinity, "550.90.07") is None
    assert affinity_verdict(affinity, "not a version") is None  # the driver does not matter then


@pytest.mark.parametrize(
    ("affinity", "words"),
    [
        ("nodeAffinity", "cannot read spec.affinity: expected an object, got str"),
        ({"nodeAffinity": []}, "cannot read spec.affinity.nodeAffinity: expected an object"),
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": {}}}},
            "nodeSelectorTerms: expected a list of terms",
        ),
        (
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": ["x"]}
                }
            },
            "expected a list of terms",
        ),
        (
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": {"key": LABEL}}]
                    }
                }
            },
            "nodeSelectorTerms[0].matchExpressions",
        ),
        (required(["In 550"]), "nodeSelectorTerms[0].matchExpressions"),  # type: ignore[list-item]
    ],
)
def test_unreadable_affinity_is_a_refusal(affinity: Any, words: str) -> None:
    verdict = affinity_verdict(affinity, "550.90.07")
    assert verdict is not None and not verdict.admitted and words in verdict.reason, verdict
