"""The `upgrader` command line. Thin: parse, validate, hand over; bad input is one line and exit 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 0 and 65535, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from upgrader.sim.scenarios import DEFAULT_NODES, SCENARIOS

    parser = _Parser(prog="upgrader", description="Rolling GPU driver upgrades for Kubernetes.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sim = commands.add_parser("sim", help="the embedded Kubernetes API emulator")
    sim_commands = sim.add_subparsers(dest="sim_command", required=True, parser_class=_Parser)
    serve = sim_commands.add_parser("serve", help="serve an emulated GPU cluster on 127.0.0.1")
    serve.add_argument("--scenario", default="healthy", choices=sorted(SCENARIOS))
    serve.add_argument("--nodes", type=_positive_int, default=DEFAULT_NODES)
    serve.add_argument("--port", type=_port, default=0, help="0 picks a free port")
    serve.add_argument("--kubeconfig", required=True, help="where to write a kubeconfig for it")
    serve.add_argument("--audit-log", help="write every request as a JSON line to this file")
    serve.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "sim" and args.sim_command == "serve":
            from upgrader.sim.serve import serve

            return serve(args.scenario, args.nodes, args.port, args.kubeconfig, args.audit_log, args.seed)
    except UsageError as exc:
        sys.stderr.write(f"upgrader: error: {exc}\n")
        return EXIT_USAGE
    parser.error("unknown command")


if __name__ == "__main__":
    raise SystemExit(main())
