"""`upgrader compat`: the verdict on stdout, exit 0 admitted / 1 refused / 2 usage, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from upgrader.commands.cli import main

BACKWARD = (
    "admitted: backward compatibility (driver 550.90.07 >= 520.61.05, the toolkit driver of CUDA 11.8 GA (11.8.0))"
)


def compat(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["compat", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "code", "starts", "words"),
    [
        (["--driver", "550.90.07", "--cuda", "11.8"], 0, BACKWARD, ()),
        (["--driver", "580.65.06", "--cuda", "12.4", "--ptx-jit"], 0, "admitted: backward compatibility", ()),
        (
            ["--driver", "525", "--cuda", "12.0"],
            0,
            "admitted: minor-version compatibility",
            ("at or above 525", "below 525.60.13, the toolkit driver of CUDA 12.0 GA"),
        ),
        (["--driver", "535.54.03", "--cuda", "12.2", "--ptx-jit"], 0, "admitted: backward compatibility", ()),
        (["--driver", "535.54.02", "--cuda", "12.2", "--ptx-jit"], 1, "refused: ", ("below 535.54.03",)),
        (["--driver", "535.104.05", "--cuda", "12.2.2", "--ptx-jit"], 0, "admitted: backward", ("Update 2",)),
        (["--driver", "535.86.10", "--cuda", "12.2.2", "--ptx-jit"], 1, "refused: ", ("below 535.104.05",)),
        (
            ["--driver", "600", "--cuda", "13.99"],
            1,
            "refused: CUDA 13.99 is not in the toolkit-driver table",
            ("--floor 13.99=DRIVER",),
        ),
        (
            ["--driver", "600", "--cuda", "13.99", "--ptx-jit", "--floor", "13.99=599.1"],
            0,
            "admitted: backward compatibility (driver 600 >= 599.1, the pinned toolkit driver of CUDA 13.99)",
            (),
        ),
        (
            ["--driver", "535.104.05", "--cuda", "12.4", "--ptx-jit"],
            1,
            "refused: ",
            ("PTX JIT is not covered",),
        ),
        (["--driver", "580.65.05", "--cuda", "13.0"], 0, "admitted: minor-version", ("below 580.65.06",)),
        (["--driver", "580.65.05", "--cuda", "13.0", "--ptx-jit"], 1, "refused: ", ("PTX JIT",)),
        (
            ["--driver", "470.57.02", "--cuda", "12.2", "--forward-compat", "--fc-eligible"],
            0,
            "admitted: forward compatibility",
            ("below 525",),
        ),
        (
            ["--driver", "470.57.02", "--cuda", "12.2", "--fc-eligible"],
            1,
            "refused: ",
            ("cuda-compat package",),
        ),
        (
            ["--driver", "470.57.02", "--cuda", "12.2", "--forward-compat"],
            1,
            "refused: ",
            ("hardware eligible",),
        ),
        (
            ["--driver", "440.33", "--cuda", "12.2", "--forward-compat", "--fc-eligible"],
            1,
            "refused: ",
            ("host branch >= 450",),
        ),
        (
            ["--driver", "525.60.11", "--cuda", "12.0", "--floor", "12=525.60.13"],
            1,
            "refused: driver 525.60.11 is below 525.60.13, the pinned floor",
            (),
        ),
        (
            ["--driver", "525.60.13", "--cuda", "12.1", "--floor", "12=525.60.13"],
            0,
            "admitted: minor-version",
            ("the pinned floor of the CUDA 12 window",),
        ),
        (
            ["--driver", "525.60.13", "--cuda", "11.8", "--floor", "12=525.60.13", "--floor", "11=470"],
            0,
            "admitted: backward",
            (),
        ),
        (["--driver", "550", "--cuda", "14.0"], 1, "refused: no compatibility rule recorded for CUDA 14", ()),
        (["--driver", "550", "--cuda", "10.2"], 1, "refused: no compatibility rule recorded for CUDA 10", ()),
    ],
)
def test_compat_prints_the_verdict(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int, starts: str, words: tuple[str, ...]
) -> None:
    got, out, err = compat(capsys, *argv)
    assert (got, err) == (code, "")
    assert out.endswith("\n") and out.count("\n") == 1, out
    assert out.startswith(starts), out
    for word in words:
        assert word in out, out


def test_the_documented_example_is_exact(capsys: pytest.CaptureFixture[str]) -> None:
    assert compat(capsys, "--driver", "550.90.07", "--cuda", "11.8") == (0, BACKWARD + "\n", "")


def test_the_readme_examples_give_both_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's compat lines, run as written: the one admitted with PTX JIT, the one refused."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    lines = [line for line in readme.splitlines() if line.startswith("upgrader compat ")]
    verdicts = {}
    for line in lines:
        command, _, comment = line.partition("#")
        code, out, err = compat(capsys, *command.split()[2:])
        assert err == "" and out.startswith(comment.strip().split(":")[0] + ":"), (line, out)
        verdicts[code] = out
    assert sorted(verdicts) == [0, 1], lines
    assert "--ptx-jit" in lines[0] and "--ptx-jit" in lines[1]
    assert verdicts[0].startswith("admitted: backward compatibility (driver 550.90.07 >= 550.54.14")
    assert "PTX JIT is not covered by minor-version compatibility" in verdicts[1]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--cuda", "12.4"], "the following arguments are required: --driver"),
        (["--driver", "550"], "the following arguments are required: --cuda"),
        (["--driver", "550", "--cuda", "12.4", "--floor", "12"], "floor '12' is not MAJOR=VERSION"),
        (["--driver", "550", "--cuda", "12.4", "--floor", "12=abc"], "version 'abc' is not a non-negative"),
        (
            ["--driver", "550", "--cuda", "12.4", "--floor", "14=600"],
            "no compatibility rule recorded for CUDA 14",
        ),
        (["--driver", "550", "--cuda", "12.4", "--floor", "12=500"], "a pinned floor may only raise it"),
        (["--driver", "550", "--cuda", "12.4", "--floor", "12=580"], "not below 580"),
        (["--driver", "550", "--cuda", "12.4", "--ptx-jit=yes"], "--ptx-jit: ignored explicit argument"),
        # a malformed driver or CUDA version is the user's typo (issue 13): a usage error, not a verdict
        (["--driver", "abc", "--cuda", "12.4"], "argument --driver: version 'abc' is not a non-negative"),
        (["--driver", "", "--cuda", "12.4"], "argument --driver: the version is empty"),
        (["--driver=-1", "--cuda", "12.4"], "argument --driver: version '-1'"),
        (["--driver", "525..1", "--cuda", "12.4"], "argument --driver: version '525..1' has an empty component"),
        (["--driver", "550 ", "--cuda", "12.4"], "argument --driver: version '550 ' contains whitespace"),
        (["--driver", "550", "--cuda", "twelve"], "argument --cuda: version 'twelve'"),
        (["--driver", "550", "--cuda", "12"], "argument --cuda: CUDA release '12' is not X.Y or X.Y.Z, e.g. 12.4"),
        (["--driver", "550", "--cuda", "12.4.127.1"], "argument --cuda: CUDA release '12.4.127.1' is not X.Y"),
        (["--driver", "550", "--cuda", "12.4", "--floor", "12.4=550.1"], "below 550.54.14, the toolkit driver"),
        (["--driver", "550", "--cuda", "12.4", "--floor", "12.x=550"], "'12.x' is not a CUDA major or a release"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["compat", *argv])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2
    assert out == ""
    assert err.startswith("upgrader: error: ") and err.count("\n") == 1, err
    assert words in err


def test_conflicting_floors_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--driver", "550", "--cuda", "12.4", "--floor", "12=525.60.13", "--floor", "12=526"]
    code, out, err = compat(capsys, *argv)
    assert (code, out) == (2, "")
    assert err == "upgrader: error: argument --floor: floor '12=526': CUDA 12 already has floor 525.60.13\n"


def test_help_lists_compat_and_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["compat", "--help"])
    out, _ = capsys.readouterr()
    assert exit_.value.code == 0
    for flag in ("--driver", "--cuda", "--ptx-jit", "--forward-compat", "--fc-eligible", "--floor"):
        assert flag in out


UPGRADER = Path(sys.executable).with_name("upgrader")


@pytest.mark.parametrize(
    ("argv", "code", "stdout_starts", "stderr_starts"),
    [
        (["--driver", "abc", "--cuda", "twelve"], 2, "", "upgrader: error: argument --driver: version 'abc'"),
        (["--driver", "550.90.07", "--cuda", "12.4", "--floor", "12=5..x"], 2, "", "upgrader: error: "),
        (["--driver", "550.90.07", "--cuda", "11.8"], 0, BACKWARD, ""),
    ],
)
def test_installed_command_never_shows_a_traceback(
    argv: list[str], code: int, stdout_starts: str, stderr_starts: str
) -> None:
    assert UPGRADER.exists(), f"the console script is missing at {UPGRADER}"
    done = subprocess.run(
        [str(UPGRADER), "compat", *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == code, done
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout.startswith(stdout_starts)
    assert done.stderr.startswith(stderr_starts) and done.stderr.count("\n") <= 1, done.stderr


def test_docs_compatibility_examples_print_what_the_page_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/compatibility.md shows each command followed by its output line: run them and compare."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "compatibility.md").read_text()
    block = page.split("```\n", 2)[1]
    pairs = [chunk.splitlines() for chunk in block.strip().split("\n\n")]
    assert len(pairs) == 2
    for command, shown in pairs:
        code, out, err = compat(capsys, *command.split()[2:])
        assert (out, err) == (shown + "\n", ""), command
        assert code == (0 if shown.startswith("admitted: ") else 1)
