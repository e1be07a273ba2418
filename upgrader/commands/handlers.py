"""The CLI's commands behind argument parsing: each loads its input, then does one thing."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from upgrader.controller.settings import Settings, load_policy, load_settings
from upgrader.core.model.input_errors import printable
from upgrader.core.report.document import to_dict
from upgrader.inputs import LEDGER_MAX_BYTES, MIB, PROFILES_MAX_BYTES, ConfigError, collector_paused, read_bounded

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from upgrader.controller.loop import Controller
    from upgrader.controller.preflight_source import PreflightFiles, PreflightFlags
    from upgrader.core.policy.policy import Policy
    from upgrader.kube.api import KubeApi

# The Kubernetes client loads slowly; commands that do not talk to a cluster (plan --from-file,
# demo's own emulator) import it only when they need it.

EXIT_FAILED = 1

log = logging.getLogger("upgrader")


def _api(args: argparse.Namespace) -> KubeApi:
    from upgrader.kube.api import KubeApi
    from upgrader.kube.client import api_client

    return KubeApi(api_client(args.kubeconfig, args.context), attempts=3, max_delay=5)


def run(args: argparse.Namespace) -> int:
    from upgrader.commands import logs
    from upgrader.controller.preflight_source import PreflightFlags, read_files
    from upgrader.controller.runner import Lifetime, build_controller, run_until_signalled
    from upgrader.kube.client import api_client

    policy = load_policy(args.policy)
    settings = load_settings(namespace=getattr(args, "namespace", None), rollout=args.rollout)
    if settings.rollout is not None and args.policy:
        raise ConfigError(
            f"--policy {args.policy} and the rollout {settings.rollout} (--rollout or UPGRADER_ROLLOUT): give one; "
            "the object's spec is the policy, --policy is for clusters without the DriverRollout CRD"
        )
    log_format = logs.log_format(args.log_format)
    preflight = PreflightFlags(args.ledger, args.profiles, tuple(args.floor))
    flags = read_files(policy, preflight)  # exit 2 before any read
    client = api_client(args.kubeconfig, args.context)
    start = Start(settings, not args.no_leader_election, args.policy, flags, preflight)

    def start_logging() -> None:
        logs.configure(log_format, args.verbose)

    if args.once:
        return _run_once(client, policy, start, start_logging)
    start_logging()
    controller = build_controller(client, policy, settings, start.leader_election, flags)
    with Lifetime(controller, start.intent) as lifetime:
        start.attach(controller, once=False)
        port = args.metrics_port if args.metrics_port is not None else settings.metrics_port
        server = None
        if port:
            from upgrader.controller.runner import serve_metrics

            try:
                server = serve_metrics(controller, port)
            except OSError as exc:
                raise ConfigError(f"--metrics-port {port}: {exc.strerror}") from None
        try:
            return run_until_signalled(controller, args.policy, lifetime)
        finally:
            if server is not None:
                server.stop()


@dataclass(frozen=True)
class Start:
    """What `run` starts with: settings, the Lease or not, and where the intent comes from."""

    settings: Settings
    leader_election: bool
    policy_path: str | None
    flags: PreflightFiles
    preflight: PreflightFlags

    @property
    def intent(self) -> str:
        """Where the intent comes from, for the first log line."""
        if self.settings.rollout is not None:
            from upgrader.core.policy.rollout_object import object_name

            return f"rollout object {object_name(self.settings.rollout)}"
        return f"policy file {self.policy_path}" if self.policy_path else "default policy"

    def attach(self, controller: Controller, once: bool) -> None:
        """In object mode, the object as the controller's intent. Not there: `--once` refuses (exit 2);
        a long-running controller says so and waits for it (each pass reads it again)."""
        if self.settings.rollout is None:
            return
        from upgrader.controller.runner import attach_rollout
        from upgrader.kube.rollout_object import RolloutMissing

        try:
            attach_rollout(controller, self.settings.rollout, self.preflight)
        except RolloutMissing as exc:
            if once:
                raise ConfigError(f"--rollout {self.settings.rollout}: {exc}") from None
            log.warning("%s; nothing is started until it is there", exc)


def _run_once(client: ApiClient, policy: Policy, start: Start, start_logging: Callable[[], None] | None = None) -> int:
    """One pass: exit 0 when it ran and every write went through, printing the status; else exit 1
    with one line on stderr saying why it could not act (no status of a pass that did not run).
    The Lease it took is released when it exits, so the next `run` takes over at once."""
    from upgrader.controller.runner import Lifetime, build_controller
    from upgrader.kube.api import ApiError, KubeApi
    from upgrader.kube.snapshot import status_path

    settings = start.settings
    api = KubeApi(client, attempts=3, max_delay=5)
    try:
        # Before logging is on: an API server that does not answer is one line, not pages of retries.
        api.get(status_path(settings))
    except ApiError as exc:
        if exc.status == 0:
            _could_not_act(f"cannot reach the API server {client.configuration.host}: {api_cause(exc.message)}")
            return EXIT_FAILED
    if start_logging is not None:
        start_logging()
    controller = build_controller(client, policy, settings, start.leader_election, start.flags)
    with Lifetime(controller, start.intent, once=True) as lifetime:
        start.attach(controller, once=True)
        verdict = _one_pass(controller, api, settings, start.policy_path)
        lifetime.why = f"--once{verdict}" if verdict else "--once done"
    if verdict:  # the one line on stderr, after the log's last
        print(f"upgrader: run --once{verdict}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _one_pass(controller: Controller, api: KubeApi, settings: Settings, policy_path: str | None) -> str | None:
    """The pass of `run --once`, printing the status when it ran; None when every write went through,
    else what follows `run --once` in the line saying why not (` could not act: ...`)."""
    from upgrader.controller.runner import check_policy_against_cluster
    from upgrader.core.model.actions import Result
    from upgrader.kube.api import ApiError

    try:
        check_policy_against_cluster(controller, policy_path)  # a policy that does not fit: exit 2, nothing written
    except ApiError as exc:  # read as the pass would: it failed the same way
        return f" could not act: the pass failed: {api_cause(str(exc))}"
    report = controller.reconcile()
    intent = controller.intent
    if intent is not None and intent.in_force is None and intent.problem:  # the object's spec never valid
        return f" could not act: {intent.problem}"
    if not report.leader and controller.elector is not None:
        return f" could not act: {_not_leading(api, controller.elector.path, settings)}"
    if report.status is not None:
        print(json.dumps(to_dict(report.status), indent=2, sort_keys=True))
    failed = [o for o in report.outcomes if o.result is Result.ERROR]
    if failed:  # the pass ran; some of its writes did not go through
        first = failed[0]
        where = f" on {node}" if (node := getattr(first.action, "node", None)) else ""
        return (
            f": {len(failed)} of {len(report.outcomes)} writes failed, the first: "
            f"{type(first.action).__name__}{where}: {api_cause(first.message)}"
        )
    if report.error:  # the pass stopped on an API error
        return f" could not act: the pass failed: {api_cause(report.error)}"
    return None


def _could_not_act(why: str) -> None:
    print(f"upgrader: run --once could not act: {why}", file=sys.stderr)


def api_cause(message: str) -> str:
    """The OS's words from urllib3's nested exception text ("Connection refused"), else all of it."""
    found = re.search(r"\[Errno -?\d+\] ([^\"')]+)", message)
    return found.group(1).strip() if found else " ".join(message.split())


def _not_leading(api: KubeApi, lease_path: str, settings: Settings) -> str:
    from upgrader.kube.api import ApiError

    lease = f"{settings.namespace}/{settings.lease_name}"
    try:
        current = api.get(lease_path)
    except ApiError as exc:
        return f"cannot take the leader Lease {lease}: {api_cause(exc.message)}"
    holder = ((current or {}).get("spec") or {}).get("holderIdentity")
    if holder and holder != settings.identity:
        return f"not the leader: Lease {lease} is held by {printable(str(holder))}, which acts"
    return f"cannot take the leader Lease {lease} (the log above says why)"


def demo(args: argparse.Namespace) -> int:
    from upgrader.commands.demo import run_demo

    policy = load_policy(args.policy) if args.policy else None
    return run_demo(args.scenario, args.nodes, policy, sys.stdout, timeout=args.timeout, policy_path=args.policy)


def plan(args: argparse.Namespace) -> int:
    """Read-only: exit 0 without blocking findings, 1 with, 2 on bad input.

    One bounded piece of work over a decoded cluster, so the cyclic collector is held off for all of
    it: at 5,000 nodes it otherwise traced the growing heap for two thirds of the wall time.
    """
    with collector_paused():
        return _plan(args)


def _plan(args: argparse.Namespace) -> int:
    from upgrader.commands import plan_source
    from upgrader.commands.planview import render_plan
    from upgrader.core.compat.cuda import parse_floors, parse_version
    from upgrader.core.compat.images import parse_ledger
    from upgrader.core.compat.profiles import load_profiles_text
    from upgrader.core.plan.report import PlanOptions, build_plan

    policy = load_policy(args.policy)
    settings = load_settings(namespace=getattr(args, "namespace", None), rollout=args.rollout)
    if settings.rollout is not None and (args.policy or args.from_file):
        flag = f"--policy {args.policy}" if args.policy else f"--from-file {args.from_file}"
        raise ConfigError(
            f"{flag} and the rollout {settings.rollout} (--rollout or UPGRADER_ROLLOUT): the rollout's spec is read "
            "from the live cluster; plan a file with --policy"
        )
    if args.target_driver is not None:
        try:
            parse_version(args.target_driver)
        except ValueError as exc:
            raise ConfigError(f"--target-driver {args.target_driver!r}: {exc}") from None
    try:
        floors = parse_floors(args.floor)
    except ValueError as exc:  # each --floor was checked alone; this is two different ones for one key
        raise ConfigError(f"--floor: {exc}") from None
    ledger = None
    if args.ledger:
        try:
            ledger = frozenset(parse_ledger(_read(args.ledger, "--ledger", LEDGER_MAX_BYTES)))
        except ValueError as exc:
            raise ConfigError(f"--ledger {args.ledger}: {exc}") from None
    profiles = None
    if args.profiles:
        try:
            profiles = load_profiles_text(_read(args.profiles, "--profiles", PROFILES_MAX_BYTES), args.profiles)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        except RecursionError:
            raise ConfigError(f"profiles {args.profiles}: nested too deeply") from None
    limit = settings.from_file_max_mib * MIB
    if args.from_file:
        data = plan_source.from_file(args.from_file, limit)
        now = time.time()
    else:
        from upgrader.kube.api import ApiError

        try:
            api = _api(args)
            if settings.rollout is not None:
                policy = _rollout_policy(api, settings.rollout)
            data = plan_source.from_cluster(api, settings)
            now = api.server_clock.now()  # windows judged on the cluster's clock, not the laptop's
        except ApiError as exc:
            print(f"upgrader: cannot read the cluster: {exc.message}", file=sys.stderr)
            return EXIT_FAILED
    try:
        snapshot, resources = plan_source.to_snapshot(data, settings, plan_source.relevant_pods(policy), args.policy)
        del data  # the raw objects are not needed any more
        options = PlanOptions(args.target_driver, ledger, profiles, floors, args.wave_duration)
        result = build_plan(snapshot, policy, now, options, resources)
    except RecursionError:  # a value about 1,000 levels deep in the file, which the plan met
        if not args.from_file:
            raise
        raise ConfigError(f"--from-file {args.from_file}: {plan_source.TOO_DEEP}") from None
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        # A field of the wrong JSON type deep in an object: name it, from the file, or as the live
        # object had it. Anything else is a bug.
        problem = plan_source.shape_problem(args.from_file, limit) if args.from_file else None
        if problem is None and isinstance(exc, plan_source.MalformedObject):
            problem = str(exc)
        if problem is None:
            raise
        raise ConfigError(problem) from None
    if args.output == "json":
        print(json.dumps(result.to_dict(), indent=2))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(result.to_dict(), sort_keys=False), end="")
    else:
        print(render_plan(result), end="")
    return EXIT_FAILED if result.blocking else 0


def _rollout_policy(api: KubeApi, name: str) -> Policy:
    """`plan --rollout NAME`: the object's spec as the policy (its newest generation, judged as the
    controller judges it); not there, or a spec the controller would refuse: exit 2, one line."""
    from upgrader.core.policy.rollout_object import read_intent
    from upgrader.kube.rollout_object import RolloutMissing, read_rollout

    try:
        intent = read_intent(name, read_rollout(api, name))
    except RolloutMissing as exc:
        raise ConfigError(f"--rollout {name}: {exc}") from None
    if intent.policy is None:
        raise ConfigError(intent.problem or f"--rollout {name}: spec refused")
    return intent.policy


def _read(path: str, flag: str, limit: int) -> str:
    try:
        return read_bounded(path, f"{flag} {path}", limit).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{flag} {path}: not UTF-8 text") from None
