"""The CLI's commands behind argument parsing: each loads its input, then does one thing."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

from upgrader.config import ConfigError, Settings, load_policy, load_settings
from upgrader.core.timefmt import rfc3339
from upgrader.statusview import render_table

if TYPE_CHECKING:
    from upgrader.kube.api import KubeApi

# The Kubernetes client loads slowly; commands that do not talk to a cluster (plan --from-file,
# demo's own emulator) import it only when they need it.

EXIT_FAILED = 1


def _api(args: argparse.Namespace) -> KubeApi:
    from upgrader.kube.api import KubeApi
    from upgrader.kube.client import api_client

    return KubeApi(api_client(args.kubeconfig, args.context), attempts=3, max_delay=5)


def run(args: argparse.Namespace) -> int:
    from upgrader.kube.client import api_client
    from upgrader.runner import build_controller, run_until_signalled

    policy = load_policy(args.policy)
    settings = load_settings(namespace=getattr(args, "namespace", None))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    controller = build_controller(
        api_client(args.kubeconfig, args.context),
        policy,
        settings,
        leader_election=not args.no_leader_election,
    )
    if args.once:
        report = controller.reconcile()
        print(json.dumps(report.status, indent=2, sort_keys=True))
        return EXIT_FAILED if report.error else 0
    port = args.metrics_port if args.metrics_port is not None else settings.metrics_port
    server = None
    if port:
        from upgrader.runner import serve_metrics

        try:
            server = serve_metrics(controller, port)
        except OSError as exc:
            raise ConfigError(f"--metrics-port {port}: {exc.strerror}") from None
    try:
        return run_until_signalled(controller)
    finally:
        if server is not None:
            server.stop()


def demo(args: argparse.Namespace) -> int:
    from upgrader.demo import run_demo

    policy = load_policy(args.policy) if args.policy else None
    return run_demo(args.scenario, args.nodes, policy, sys.stdout, timeout=args.timeout)


def read_status(api: KubeApi, settings: Settings) -> dict[str, Any] | None:
    from upgrader.kube.snapshot import status_path

    cm = api.get(status_path(settings))
    if cm is None:
        return None
    data = cm.get("data") or {}
    try:
        status = json.loads(data.get("status.json") or "{}")
    except ValueError:
        raise ConfigError(f"configmap {settings.namespace}/{settings.status_configmap} holds no valid status") from None
    status["paused"] = data.get("paused") == "true"
    return status


def status(args: argparse.Namespace) -> int:
    from upgrader.kube.api import ApiError

    settings = load_settings(namespace=getattr(args, "namespace", None))
    api = _api(args)
    while True:
        try:
            current = read_status(api, settings)
        except ApiError as exc:
            print(f"upgrader: cannot read status: {exc.message}", file=sys.stderr)
            return EXIT_FAILED
        if current is None:
            print(
                f"upgrader: no rollout status in configmap {settings.namespace}/{settings.status_configmap} "
                "(has the controller run yet?)",
                file=sys.stderr,
            )
            return EXIT_FAILED
        text = json.dumps(current, indent=2, sort_keys=True) if args.output == "json" else render_table(current)
        if args.watch:
            sys.stdout.write("\x1b[2J\x1b[H" + text + "\n")
            sys.stdout.flush()
            try:
                time.sleep(2)
            except KeyboardInterrupt:
                return 0
            continue
        print(text)
        return 0


def _control(args: argparse.Namespace, verb: str, data: dict[str, str]) -> Settings | None:
    """Patch the status ConfigMap for pause/resume; None (after one line on stderr) if the API refused."""
    from upgrader.kube.api import ApiError
    from upgrader.kube.apply import patch_configmap

    settings = load_settings(namespace=getattr(args, "namespace", None))
    api = _api(args)
    try:
        patch_configmap(api, settings, data)
    except ApiError as exc:
        print(f"upgrader: cannot {verb}: {exc.message}", file=sys.stderr)
        return None
    return settings


def pause(args: argparse.Namespace) -> int:
    settings = _control(args, "pause", {"paused": "true"})
    if settings is None:
        return EXIT_FAILED
    print(f"paused: no new node starts (configmap {settings.namespace}/{settings.status_configmap})")
    return 0


def resume(args: argparse.Namespace) -> int:
    if _control(args, "resume", {"paused": "false", "resumedAt": rfc3339(time.time())}) is None:
        return EXIT_FAILED
    print("resumed: failures recorded so far are acknowledged; the rollout continues")
    return 0


def plan(args: argparse.Namespace) -> int:
    """Read-only: exit 0 without blocking findings, 1 with, 2 on bad input."""
    from upgrader import plan_source
    from upgrader.core.compat import parse_version
    from upgrader.core.images import parse_ledger
    from upgrader.core.plan import PlanOptions, build_plan
    from upgrader.core.profiles import load_profiles_text
    from upgrader.planview import render_plan

    policy = load_policy(args.policy)
    settings = load_settings(namespace=getattr(args, "namespace", None))
    if args.target_driver is not None:
        try:
            parse_version(args.target_driver)
        except ValueError as exc:
            raise ConfigError(f"--target-driver {args.target_driver!r}: {exc}") from None
    ledger = None
    if args.ledger:
        try:
            ledger = frozenset(parse_ledger(_read(args.ledger, "--ledger")))
        except ValueError as exc:
            raise ConfigError(f"--ledger {args.ledger}: {exc}") from None
    profiles = None
    if args.profiles:
        try:
            profiles = load_profiles_text(_read(args.profiles, "--profiles"), args.profiles)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if args.from_file:
        data = plan_source.from_file(args.from_file)
    else:
        from upgrader.kube.api import ApiError

        try:
            data = plan_source.from_cluster(_api(args), settings)
        except ApiError as exc:
            print(f"upgrader: cannot read the cluster: {exc.message}", file=sys.stderr)
            return EXIT_FAILED
    try:
        snapshot, resources = plan_source.to_snapshot(data, settings, plan_source.relevant_pods(policy))
        del data  # the raw objects are not needed any more
        result = build_plan(snapshot, policy, time.time(), PlanOptions(args.target_driver, ledger, profiles), resources)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        # A field of the wrong JSON type deep in an object: name it, from the file, or as the live
        # object had it. Anything else is a bug.
        problem = plan_source.shape_problem(args.from_file) if args.from_file else None
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


def _read(path: str, flag: str) -> str:
    try:
        return open(path, encoding="utf-8").read()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{flag} {path}: not UTF-8 text") from None
