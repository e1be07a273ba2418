"""`upgrader compat`: may a workload built for CUDA release R run on a node with driver D? (docs/compatibility.md)

Prints `admitted: <reason>` or `refused: <reason>`, naming the path and the numbers it used. Exit 0
admitted, 1 refused, 2 usage: a malformed --driver, --cuda or --floor is the user's typo, said in one
line, not a verdict. (The check itself still fails closed on what it cannot read, for other callers.)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from upgrader.core.compat.cuda import check, parse_floors, parse_release, parse_version

EXIT_ADMITTED, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


FLOOR_HELP = (
    "pin a floor (repeatable): MAJOR=VERSION raises a major's minimum driver, e.g. 12=525.60.13; "
    "X.Y[.Z]=VERSION sets the toolkit driver of a release the table does not list yet, e.g. 13.6=600.12.01"
)


def _checked(parse: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse type that validates with `parse` at parse time, so a bad value is argparse's
    one-line error (exit 2), and keeps the text."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return check


floor_item = _checked(lambda text: parse_floors([text]))  # one --floor; plan's --floor uses it too
_version = _checked(parse_version)  # --driver
_release = _checked(parse_release)  # --cuda: X.Y or X.Y.Z


def add_parser(commands: argparse._SubParsersAction[Any]) -> None:
    """Add the `compat` subcommand to the `upgrader` subparsers."""
    compat = commands.add_parser(
        "compat",
        help="may a workload built for CUDA R run on driver D (backward, minor-version, forward compat)",
        description="Check a driver / CUDA release pair: backward compatibility at or above the "
        "release's toolkit driver (NVIDIA's table), minor-version compatibility from the major's "
        "minimum driver up to it (no PTX JIT), forward compatibility below it. "
        "Exit 0 admitted, 1 refused, 2 usage error.",
    )
    compat.add_argument(
        "--driver", required=True, type=_version, metavar="D", help="node driver version, e.g. 550.90.07"
    )
    compat.add_argument(
        "--cuda",
        required=True,
        type=_release,
        metavar="R",
        help="the workload's CUDA release: X.Y for its GA (e.g. 12.4) or X.Y.Z for that release (e.g. 12.4.1)",
    )
    compat.add_argument("--ptx-jit", action="store_true", help="the workload JIT-compiles PTX")
    compat.add_argument(
        "--forward-compat", action="store_true", help="the workload image ships the cuda-compat package"
    )
    compat.add_argument(
        "--fc-eligible",
        action="store_true",
        help="the node's hardware is eligible for forward compatibility (data-centre GPU, ...)",
    )
    compat.add_argument(
        "--floor",
        action="append",
        default=[],
        type=floor_item,
        metavar="KEY=VERSION",
        help=FLOOR_HELP,
    )


def run(args: argparse.Namespace) -> int:
    """Print the verdict; the exit code says admitted (0), refused (1) or usage error (2)."""
    try:
        floors = parse_floors(args.floor or [])
    except ValueError as exc:  # e.g. two different floors for one major
        sys.stderr.write(f"upgrader: error: argument --floor: {exc}\n")
        return EXIT_USAGE
    verdict = check(
        args.driver,
        args.cuda,
        ptx_jit=args.ptx_jit,
        forward_compat=args.forward_compat,
        fc_eligible=args.fc_eligible,
        floors=floors,
    )
    print(f"{'admitted' if verdict.admitted else 'refused'}: {verdict.reason}")
    return EXIT_ADMITTED if verdict.admitted else EXIT_REFUSED
