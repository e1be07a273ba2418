"""`upgrader status`: read the rollout status a controller keeps (`pause`, `resume` and `acknowledge`
are in control.py).

Where: `-n`, else `UPGRADER_NAMESPACE`, else the one of CONTROLLER_NAMESPACES (`upgrader-system`,
as deployed; `gpu-operator`, where `upgrader run` and the emulator keep it by default) that holds
the status ConfigMap or the Lease; in both is ambiguous and refused (exit 2). Whether a controller
acts on that status comes from its Lease, not from the status's age. Exit 1, with one line, when
the cluster cannot be read, there is no status to change, or (status) no controller is running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from upgrader.commands.liveness import ControllerSeen, judge_lease, unreadable
from upgrader.commands.statusview import render_table, render_watch
from upgrader.controller.settings import CONTROLLER_NAMESPACES, Settings, load_settings
from upgrader.core.policy.rollout_object import object_name
from upgrader.inputs import ConfigError

if TYPE_CHECKING:
    from upgrader.kube.api import KubeApi

EXIT_FAILED = 1
WATCH_SECONDS = 2.0


class Refused(Exception):
    """The command cannot do what was asked; the message is the one line a user sees (exit 1)."""


def _status_path(settings: Settings) -> str:
    return f"/api/v1/namespaces/{settings.namespace}/configmaps/{settings.status_configmap}"


def _lease_path(settings: Settings) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{settings.namespace}/leases/{settings.lease_name}"


def _where(settings: Settings) -> str:
    return f"{settings.namespace}/{settings.status_configmap}"


def _given(args: argparse.Namespace) -> bool:
    """The namespace was said (flag or environment), rather than to be found."""
    return bool(args.namespace or os.environ.get("UPGRADER_NAMESPACE"))


def locate(api: KubeApi, args: argparse.Namespace) -> Settings:
    """The settings, in the namespace given or found (said on stderr when found)."""
    settings = load_settings(namespace=args.namespace)
    if _given(args):
        return settings
    found = [
        ns for ns in CONTROLLER_NAMESPACES if _holds_controller(api, settings.model_copy(update={"namespace": ns}))
    ]
    if len(found) > 1:
        raise ConfigError(
            f"a controller's status or Lease is in each of namespaces {' and '.join(found)}: "
            "say which with -n (or UPGRADER_NAMESPACE)"
        )
    if not found:
        return settings  # nothing anywhere: the messages name the default and where else was looked
    print(f"upgrader: namespace {found[0]} (the controller's status or Lease is there; -n chooses)", file=sys.stderr)
    return settings.model_copy(update={"namespace": found[0]})


def _holds_controller(api: KubeApi, settings: Settings) -> bool:
    """The status ConfigMap or the Lease is in settings' namespace; one we may not read is not found."""
    from upgrader.kube.api import ApiError

    for path in (_status_path(settings), _lease_path(settings)):
        try:
            if api.get(path) is not None:
                return True
        except ApiError as exc:
            if exc.status != 403:
                raise
    return False


def _not_found(settings: Settings, given: bool) -> str:
    others = [ns for ns in CONTROLLER_NAMESPACES if ns != settings.namespace]
    if given or not others:
        return f"no rollout status in configmap {_where(settings)} (has the controller run yet?)"
    return (
        f"no rollout status in configmap {_where(settings)}, nor in namespace {', '.join(others)} "
        "(has the controller run yet? -n names its namespace)"
    )


def read_status(api: KubeApi, settings: Settings, given: bool) -> dict[str, Any]:
    """The stored status with `paused` as the operators set it; Refused when there is none (or only a
    blank one)."""
    cm = api.get(_status_path(settings))
    data = (cm or {}).get("data") or {}
    if not data.get("status.json"):  # absent, or only the keys an old `resume` wrote
        raise Refused(_not_found(settings, given))
    try:
        status = json.loads(data["status.json"])
    except ValueError:
        status = None
    if not isinstance(status, dict) or not status.get("phase"):
        raise Refused(f"configmap {_where(settings)} holds no valid status")
    from upgrader.kube.snapshot import control_path

    control = ((api.get(control_path(settings)) or {}).get("data")) or {}
    # As the operators set it; else an older CLI's key in the status; else the pause the status recorded.
    status["paused"] = control.get("paused") == "true" or data.get("paused") == "true" or status.get("paused") is True
    return status


GONE = (
    "a controller that had a spec in force finishes the nodes in progress and starts none "
    "(runbooks/rollout-object-missing.md)"
)


def _configmap_status(api: KubeApi, settings: Settings, given: bool) -> dict[str, Any]:
    """`run --policy`'s status; where none is, and the cluster serves DriverRollouts but holds none, the
    refusal says that a deleted one may be why (docs/operations.md#the-rollout-object-deleted)."""
    from upgrader.kube.rollout_object import GROUP_VERSION_PATH

    try:
        return read_status(api, settings, given)
    except Refused as exc:
        if api.get(GROUP_VERSION_PATH) is None:
            raise
        raise Refused(f"{exc}; the cluster serves driverrollouts but has none (kubectl get dro): if one was "
                      f"deleted, {GONE}") from None


def find_rollout(api: KubeApi, args: argparse.Namespace) -> dict[str, Any] | None:
    """The DriverRollout these commands act on: `--rollout` (or UPGRADER_ROLLOUT), else the only one
    the cluster has (said on stderr); None where it has none or does not serve the CRD, and the
    ConfigMaps of `run --policy` are read instead. Several, none named: refused (exit 2)."""
    from upgrader.core.policy.rollout_object import RESOURCE
    from upgrader.kube.rollout_object import GROUP_VERSION_PATH, read_rollout
    from upgrader.kube.rollout_object import RolloutMissing as Missing

    name = load_settings(rollout=getattr(args, "rollout", None)).rollout
    if name:
        try:
            return read_rollout(api, name)
        except Missing as exc:
            raise Refused(f"{exc}; if it was deleted, {GONE}") from None
    if api.get(GROUP_VERSION_PATH) is None:
        return None
    items = api.list(f"{GROUP_VERSION_PATH}/driverrollouts").get("items", [])
    if len(items) > 1:
        names = ", ".join(sorted(str(i["metadata"]["name"]) for i in items))
        raise ConfigError(f"{len(items)} {RESOURCE} ({names}): say which with --rollout (or UPGRADER_ROLLOUT)")
    if not items:
        return None
    only = object_name(items[0]["metadata"]["name"])
    print(f"upgrader: {only} (the only rollout; --rollout chooses)", file=sys.stderr)
    return dict(items[0])


def rollout_settings(args: argparse.Namespace, obj: dict[str, Any]) -> Settings:
    """Where the object's controller keeps its Lease: as its status says (`lease`), else -n or the default."""
    settings = load_settings(namespace=args.namespace)
    lease = str((obj.get("status") or {}).get("lease") or "")
    if "/" in lease and not _given(args):
        namespace, name = lease.split("/", 1)
        return settings.model_copy(update={"namespace": namespace, "lease_name": name})
    return settings


def rollout_report(obj: dict[str, Any]) -> dict[str, Any]:
    """The object's status as `read_status` gives the ConfigMap's: Refused when no controller wrote one."""

    status = obj.get("status") or {}
    report = dict(status.get("report") or {})
    name = object_name(str(obj["metadata"]["name"]))
    if not report.get("phase"):
        if status.get("phase") == "Invalid":  # never a valid spec: the status says why, and nothing more
            report = {"phase": "Invalid", "message": str(status.get("message", ""))}
            report["updated_at"] = status.get("updatedAt")
        else:
            raise Refused(f"no rollout status on {name} (has the controller run yet?)")
    report["paused"] = ((obj.get("spec") or {}).get("paused") is True) or report.get("paused") is True
    report["rollout"] = {
        "name": name,
        "generation": (obj.get("metadata") or {}).get("generation"),
        "observedGeneration": status.get("observedGeneration"),
        "conditions": status.get("conditions") or [],
    }
    return report


def read_controller(api: KubeApi, settings: Settings, now: float) -> ControllerSeen:
    from upgrader.kube.api import ApiError

    where = f"{settings.namespace}/{settings.lease_name}"
    try:
        return judge_lease(api.get(_lease_path(settings)), where, now)
    except ApiError as exc:
        if exc.status == 0:
            raise
        return unreadable(where, " ".join(exc.message.split()) or exc.reason)


def _api(args: argparse.Namespace) -> KubeApi:
    from upgrader.kube.api import KubeApi
    from upgrader.kube.client import api_client

    return KubeApi(api_client(args.kubeconfig, args.context), attempts=3, max_delay=5)


def _cluster_failure(api: KubeApi, exc: Exception) -> str:
    """One line for an API server that refused (its message) or did not answer (the OS's words)."""
    from upgrader.commands.handlers import api_cause
    from upgrader.kube.api import ApiError

    if isinstance(exc, ApiError) and exc.status != 0:
        return api_cause(exc.message) or f"{exc.status} {exc.reason}"
    cause = exc.message if isinstance(exc, ApiError) else str(exc)
    return f"cannot reach the API server {api.client.configuration.host}: {api_cause(cause)}"


def _guarded(verb: str, act: Callable[[KubeApi], int], args: argparse.Namespace) -> int:
    """Run `act(api)`; a refusal or an API failure is one line on stderr and exit 1."""
    import urllib3

    from upgrader.kube.api import ApiError

    # Bad settings or flags: exit 2 before any request.
    load_settings(namespace=getattr(args, "namespace", None), rollout=getattr(args, "rollout", None))
    api = _api(args)
    try:
        return act(api)
    except Refused as exc:  # `status` has nothing to read: no verb needed to say so
        print(f"upgrader: {exc}" if verb == "read status" else f"upgrader: cannot {verb}: {exc}", file=sys.stderr)
    except (ApiError, OSError, urllib3.exceptions.HTTPError) as exc:
        print(f"upgrader: cannot {verb}: {_cluster_failure(api, exc)}", file=sys.stderr)
    return EXIT_FAILED


def _render(status: dict[str, Any], controller: ControllerSeen, output: str, now: float) -> str:
    if output in ("table", "wide"):
        return render_table(status, controller, now, wide=output == "wide")
    shown = {**status, "controller": controller.to_dict()}
    if output == "yaml":
        import yaml

        return yaml.safe_dump(shown, sort_keys=True).rstrip("\n")
    return json.dumps(shown, indent=2, sort_keys=True)


def status(args: argparse.Namespace) -> int:
    """Exit 0 while a controller holds the Lease; 1 when none does (said first), or nothing to show."""

    def show(api: KubeApi) -> int:
        obj = find_rollout(api, args)
        settings = rollout_settings(args, obj) if obj is not None else locate(api, args)
        given = _given(args)
        if args.output == "name":  # what kubectl -o name prints: the object that holds the status
            print(object_name(obj["metadata"]["name"]) if obj is not None else f"configmap/{settings.status_configmap}")
            return 0
        if args.watch:
            return _watch(api, settings, given, args.output, obj)
        current = rollout_report(obj) if obj is not None else _configmap_status(api, settings, given)
        now = api.server_clock.now()  # ages and the Lease's freshness on the API server's clock
        controller = read_controller(api, settings, now)
        warning = controller.warning(now)
        if warning and args.output != "table":  # the table says it in its first line
            print(f"upgrader: {warning}", file=sys.stderr)
        print(_render(current, controller, args.output, now))
        return 0 if controller.alive else EXIT_FAILED

    return _guarded("read status", show, args)


def _watch(api: KubeApi, settings: Settings, given: bool, output: str, obj: dict[str, Any] | None = None) -> int:
    """Redraw every WATCH_SECONDS until Ctrl-C, which is how a watch ends (exit 0)."""
    from upgrader.kube.rollout_object import RolloutMissing, read_rollout

    try:
        while True:
            if obj is not None:
                try:
                    obj = read_rollout(api, str(obj["metadata"]["name"]))
                except RolloutMissing as exc:
                    raise Refused(str(exc)) from None
            current = rollout_report(obj) if obj is not None else read_status(api, settings, given)
            now = api.server_clock.now()
            _frame(current, read_controller(api, settings, now), output, now)
            time.sleep(WATCH_SECONDS)
    except KeyboardInterrupt:
        print()  # the frame's last line has no newline: leave the shell prompt a line of its own
        return 0


def _frame(status: dict[str, Any], controller: ControllerSeen, output: str, now: float) -> None:
    size = shutil.get_terminal_size((80, 24))
    text = (
        render_watch(status, controller, now, size.columns, size.lines)
        if output == "table"
        else _render(status, controller, output, now)
    )
    sys.stdout.write("\x1b[2J\x1b[H" + text)  # no newline after the last line: a full screen would scroll
    sys.stdout.flush()
