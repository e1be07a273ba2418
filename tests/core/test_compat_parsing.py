"""Driver / CUDA compatibility (docs/compatibility.md), its inputs: the recorded windows, parse_version and
parse_floors (pinned floors), each refusing bad text with a one-line message."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.compat.cuda import FORWARD_COMPAT_MIN, WINDOWS, parse_floors, parse_version

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
