"""The `upgrader` command line. Thin: parse, validate, hand over; bad input is one line and exit 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import NoReturn

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"upgrader: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _fleet_size(minimum: int) -> Callable[[str], int]:
    """`--nodes`: a positive integer, and at least one node per failure domain of the scenarios."""

    def parse(text: str) -> int:
        value = _positive_int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected at least {minimum} nodes (one per zone), got {value}")
        return value

    return parse


def _wave_duration(text: str) -> int:
    """`plan --wave-duration`: seconds, read as the policy reads a window's `duration`."""
    from upgrader.core.policy.windows import WindowError, parse_duration

    try:
        return parse_duration(text)
    except WindowError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 0 and 65535, got {value}")
    return value


def emulator_catalog() -> ModuleType | None:
    """The emulator's catalog of fleets, or None where the emulator (upgrader.sim) is not installed: the
    controller image leaves it out, as it holds what `run` needs (docs/image.md)."""
    try:
        from upgrader.sim.fleets import catalog
    except ModuleNotFoundError as exc:
        if exc.name is not None and (exc.name == "upgrader.sim" or exc.name.startswith("upgrader.sim.")):
            return None
        raise
    return catalog


NO_EMULATOR = (
    "`upgrader {}` needs the Kubernetes API emulator (upgrader.sim), which this installation leaves out "
    "(the controller image holds only what `run` needs); run it from a checkout (README.md)"
)


def build_parser(prog: str = "upgrader") -> argparse.ArgumentParser:
    """`prog`: how usage lines name the command (`kubectl upgrader` when run as kubectl's plugin)."""
    from upgrader.commands import compat
    from upgrader.commands.logs import LOG_FORMATS

    catalog = emulator_catalog()  # None in the controller image: demo and sim serve parse, then refuse
    zones = catalog.ZONES if catalog else ()
    nodes = _fleet_size(len(zones)) if catalog else int
    default_nodes = catalog.DEFAULT_NODES if catalog else None
    scenarios = sorted(catalog.SCENARIO_NAMES) if catalog else None

    from upgrader import __version__

    parser = _Parser(prog=prog, description="Rolling GPU driver upgrades for Kubernetes.")
    parser.add_argument("--version", action="version", version=f"upgrader {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    scenario_help = (
        "which emulated fleet: healthy, or one that halts: pdb-blocked, stuck-job, missing-image, "
        "validation-failure (default: %(default)s)"
    )
    nodes_help = (
        f"GPU nodes in the emulated fleet, spread over {len(zones)} zones (at least {len(zones)}; "
        "default: %(default)s)"
    )

    sim = commands.add_parser("sim", help="the embedded Kubernetes API emulator")
    sim_commands = sim.add_subparsers(dest="sim_command", required=True, parser_class=_Parser)
    serve = sim_commands.add_parser(
        "serve",
        help="serve an emulated GPU cluster on 127.0.0.1",
        description="Serve an emulated GPU cluster until Ctrl-C or SIGTERM. Its controller namespace is "
        "gpu-operator (where `upgrader run` keeps its status and Lease by default).",
    )
    serve.add_argument("--scenario", default="healthy", choices=scenarios, help=scenario_help)
    serve.add_argument("--nodes", type=nodes, default=default_nodes, help=nodes_help)
    serve.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1; 0 (the default) picks a free one")
    serve.add_argument("--kubeconfig", required=True, help="where to write a kubeconfig for it (required)")
    serve.add_argument("--audit-log", help="append every request as a JSON line to this file")
    serve.add_argument(
        "--enforce-rbac",
        action="store_true",
        help="authorise ServiceAccount tokens (`kubectl create token`) by the stored Roles and bindings, "
        "as kube-apiserver's RBAC authorizer does; the kubeconfig's own token stays cluster-admin",
    )
    serve.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the emulator's random choices (object uids, generated pod names): the same seed, "
        "the same names (default: %(default)s)",
    )

    run = commands.add_parser(
        "run",
        help="run the controller against a cluster",
        epilog="exit codes of --once: 0 the pass ran and printed the status; 1 it could not act (API server "
        "unreachable, a request or write failed, another replica holds the Lease), said in one line; 2 bad input",
    )
    _cluster_flags(run, RUN_NAMESPACE_HELP)
    _rollout_flag(run, "the DriverRollout object whose spec is the policy, read at every pass (env UPGRADER_ROLLOUT)")
    run.add_argument(
        "--policy",
        help="upgrade policy YAML (GPU Operator upgradePolicy keys), at most 1 MiB, read once: for clusters "
        "without the DriverRollout CRD (not with --rollout)",
    )
    run.add_argument(
        "--once", action="store_true",
        help="one reconcile pass, then exit, giving the Lease up (see exit codes below)",
    )
    run.add_argument(
        "--no-leader-election",
        action="store_true",
        help="act without taking the Lease: only when no other replica runs (`status` then reports no controller)",
    )
    run.add_argument("--metrics-port", type=_port, help="serve /metrics, /healthz, /readyz (env UPGRADER_METRICS_PORT)")
    run.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="log lines on stderr as text (the default) or JSON, one object a line: time (RFC 3339, UTC), level, "
        "logger, message, and node, state, reason on the lines about a node (env UPGRADER_LOG_FORMAT)",
    )
    run.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more log lines (default: INFO and up): -v adds upgrader's DEBUG lines, -vv the Kubernetes "
        "client's and urllib3's too",
    )
    _preflight_flags(run, "; a node whose image, profile or CUDA check fails is held at upgrade-required "
                     "(instead of the policy's preflight key)")

    demo = commands.add_parser("demo", help="emulated cluster + controller in one process, live progress")
    demo.add_argument("--scenario", default="healthy", choices=scenarios, help=scenario_help)
    demo.add_argument("--nodes", type=nodes, default=default_nodes, help=nodes_help)
    demo.add_argument("--policy", help="policy YAML instead of the demo's built-in one")
    demo.add_argument("--timeout", type=_positive_int, default=240, help="seconds before giving up")

    plan = commands.add_parser("plan", help="read-only preflight: waves, evictions, blockers, images, compatibility")
    plan.add_argument("--dry-run", action="store_true", required=True, help="required: plan never writes")
    _cluster_flags(
        plan,
        "checked as for the other commands, but unused: plan reads no object of upgrader's own "
        "(the driver's namespace is env UPGRADER_DRIVER_NAMESPACE)",
    )
    plan.add_argument(
        "--from-file",
        help="a kubectl List (JSON or YAML) instead of the live cluster; "
        "at most 512 MiB (env UPGRADER_FROM_FILE_MAX_MIB)",
    )
    plan.add_argument("--policy", help="upgrade policy YAML, at most 1 MiB")
    _rollout_flag(plan, "plan with this DriverRollout object's spec as the policy (not with --policy)")
    _preflight_flags(plan, "")
    plan.add_argument("--target-driver", help="driver version to plan for (default: each DaemonSet's)")
    plan.add_argument(
        "--wave-duration", type=_wave_duration, metavar="DURATION",
        help="how long one wave takes, like a window's duration (45m, 1h30m): with maintenanceWindows in the "
        "policy, predicts when each wave starts and in which window (an estimate; see docs/policy.md)",
    )
    plan.add_argument("-o", "--output", choices=OUTPUTS, default="table", help="output format (default: table)")

    status = commands.add_parser(
        "status",
        help="print the rollout status stored in the cluster, and whether a controller still acts on it",
        epilog="exit codes: 0 a controller holds the Lease (with -o name: the object was found); 1 none does "
        "(said first: the status may be stale), or there is no status, or the cluster cannot be read; 2 bad input",
    )
    _cluster_flags(status, FIND_NAMESPACE_HELP)
    _rollout_flag(status, ROLLOUT_HELP)
    status.add_argument(
        "-o", "--output", choices=STATUS_OUTPUTS, default="table",
        help="output format (default: table); wide adds what the rollout waits on, its domains and targets; "
        "name prints the object's resource/name, as kubectl does",
    )
    status.add_argument(
        "-w", "--watch", action="store_true", help="redraw one screen every 2 seconds until Ctrl-C (then exit 0)"
    )

    refused = (
        "with a DriverRollout, its spec is patched (RBAC: patch on driverrollouts); without one (run --policy), "
        "exit 1 (and nothing written) when no controller has written a status in its ConfigMap"
    )
    for name, text in (
        ("pause", "no new node starts; nodes already in progress finish"),
        ("resume", "end a pause (failures stay unacknowledged: see acknowledge)"),
    ):
        control = commands.add_parser(name, help=text, epilog=refused)
        _cluster_flags(control, FIND_NAMESPACE_HELP)
        _rollout_flag(control, ROLLOUT_HELP)
    ack = commands.add_parser(
        "acknowledge",
        help="let the rollout go on past upgrade-failed nodes, naming each failure as the controller recorded it",
        epilog=refused + ", or a named node is not upgrade-failed",
    )
    _cluster_flags(ack, FIND_NAMESPACE_HELP)
    _rollout_flag(ack, ROLLOUT_HELP)
    ack.add_argument("nodes", nargs="*", metavar="NODE", help="the failed nodes to acknowledge")
    ack.add_argument("--all", action="store_true", help="every node upgrade-failed now")
    promote = commands.add_parser(
        "promote",
        help="let the rollout past the stage it waits on: end a soak early, or open a promotionGate",
        epilog=refused + ", or the rollout waits on no soak or promotion (paused, halted, a failed canary: "
        "promotion is not acknowledgement)",
    )
    _cluster_flags(promote, FIND_NAMESPACE_HELP)
    _rollout_flag(promote, ROLLOUT_HELP)
    promote.add_argument("--pool", metavar="NAME", help="the pool whose stage to promote (a policy with pools)")
    compat.add_parser(commands)
    return parser


OUTPUTS = ("table", "json", "yaml")
STATUS_OUTPUTS = (*OUTPUTS, "wide", "name")
ROLLOUT_HELP = (
    "the DriverRollout object (env UPGRADER_ROLLOUT); when omitted, the only one the cluster has, else the "
    "ConfigMaps of `run --policy`"
)
RUN_NAMESPACE_HELP = "where the status ConfigMap and Lease live (env UPGRADER_NAMESPACE; default gpu-operator)"
FIND_NAMESPACE_HELP = (
    "the controller's namespace (env UPGRADER_NAMESPACE); when neither is given, the one of "
    "upgrader-system and gpu-operator that holds its status ConfigMap or Lease"
)


def _preflight_flags(parser: argparse.ArgumentParser, held: str) -> None:
    """The preflight's inputs, the same for `plan` (which reports) and `run` (which holds nodes)."""
    from upgrader.commands import compat
    parser.add_argument(
        "--ledger",
        help="driver image tags known to exist, one tag or image reference a line, # comments "
        f"(example: policies/images.example.txt), at most 16 MiB{held}",
    )
    parser.add_argument(
        "--profiles", help=f"compatibility profiles YAML (example: policies/profiles.example.yaml){held}"
    )
    parser.add_argument(
        "--floor", action="append", default=[], type=compat.floor_item, metavar="KEY=VERSION",
        help="for cuda-incompatible findings, as in `upgrader compat`: " + compat.FLOOR_HELP,
    )


def _rollout_flag(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--rollout", metavar="NAME", help=text)


def _cluster_flags(parser: argparse.ArgumentParser, namespace_help: str) -> None:
    # What upgrader/kube/client.py does, in controller-runtime's order: this file; else $KUBECONFIG;
    # else, in a pod (KUBERNETES_SERVICE_HOST/PORT set), its service account; else ~/.kube/config.
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig file; when omitted, as controller-runtime looks: $KUBECONFIG (':'-separated files are "
        "merged), else the pod's service account when run in a pod, else ~/.kube/config",
    )
    parser.add_argument(
        "--context",
        help="context in the kubeconfig (default: its current-context); without --kubeconfig it reads "
        "$KUBECONFIG or ~/.kube/config, never the pod's service account",
    )
    parser.add_argument("-n", "--namespace", help=namespace_help)


def main(argv: Sequence[str] | None = None) -> int:
    # Run as kubectl's plugin (the kubectl-upgrader script: `kubectl upgrader status`), usage says so.
    plugin = argv is None and os.path.basename(sys.argv[0]).startswith("kubectl-")
    parser = build_parser("kubectl upgrader" if plugin else "upgrader")
    args = parser.parse_args(argv)
    from upgrader.inputs import ConfigError, UsageError  # here: PyYAML loads only for a command that runs

    try:
        emulated = {"demo": "demo", "sim": "sim serve"}.get(args.command)
        if emulated and emulator_catalog() is None:
            raise UsageError(NO_EMULATOR.format(emulated))
        if args.command == "sim" and args.sim_command == "serve":
            from upgrader.commands.sim_serve import serve

            return serve(
                args.scenario, args.nodes, args.port, args.kubeconfig, args.audit_log, args.seed, args.enforce_rbac
            )
        if args.command == "compat":
            from upgrader.commands import compat

            return compat.run(args)
        from upgrader.commands import control as control_cmd
        from upgrader.commands import handlers as cmd
        from upgrader.commands import promote as promote_cmd
        from upgrader.commands import status as status_cmd

        handlers = {
            "run": cmd.run,
            "demo": cmd.demo,
            "status": status_cmd.status,
            "pause": control_cmd.pause,
            "resume": control_cmd.resume,
            "acknowledge": control_cmd.acknowledge,
            "promote": promote_cmd.promote,
            "plan": cmd.plan,
        }
        return handlers[args.command](args)
    except (UsageError, ConfigError) as exc:
        sys.stderr.write(f"upgrader: error: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("upgrader: interrupted\n")
        return EXIT_INTERRUPTED  # Ctrl-C: one word and the code a shell expects, no traceback


if __name__ == "__main__":
    raise SystemExit(main())
