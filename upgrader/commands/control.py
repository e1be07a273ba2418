"""`upgrader pause`, `resume` and `acknowledge`: the operators' intent, in the DriverRollout's spec
(`spec.paused`, `spec.acknowledgedFailures`: RBAC on driverrollouts says who may), or where the
cluster has no rollout object (`run --policy FILE`), in the control ConfigMap
(`gpu-driver-upgrade-control`, beside the status). Only people and these commands write either.

`resume` only unpauses. `acknowledge` names each failure it acknowledges by the node and the failure
as the controller recorded it (`gpu-upgrader.io/failed-at`, copied as text): a later failure of the
same node is a new one, and no clock of this machine is compared with the controller's. Each refuses
(exit 1, one line, nothing written) where no controller has written a status and no intent is kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from upgrader.commands.status import Refused, _given, _guarded, find_rollout, locate, read_status
from upgrader.controller.settings import CONTROLLER_NAMESPACES, Settings, load_settings
from upgrader.core.model.states import FAILED_AT, FAILED_REASON, FAILED_STATE, STATE_LABEL, State
from upgrader.inputs import UsageError

if TYPE_CHECKING:
    from upgrader.kube.api import KubeApi


def _write(api: KubeApi, settings: Settings, data: dict[str, str | None]) -> None:
    """Merge `data` into the control ConfigMap, creating it (it holds nothing but intent)."""
    from upgrader.kube.api import ApiError
    from upgrader.kube.snapshot import control_path

    try:
        api.patch(control_path(settings), {"data": data})
    except ApiError as exc:
        if exc.status != 404:
            raise
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": settings.control_configmap,
                "namespace": settings.namespace,
                "labels": {"app.kubernetes.io/name": "upgrader"},
            },
            "data": {k: v for k, v in data.items() if v is not None},
        }
        api.create(f"/api/v1/namespaces/{settings.namespace}/configmaps", body)


def _settings(api: KubeApi, args: argparse.Namespace) -> Settings:
    """Where to write: refused unless a controller has written a status there, or intent is already
    kept there (a status deleted while paused must not keep `resume` from ending the pause)."""
    from upgrader.kube.snapshot import control_path

    settings = locate(api, args)
    if api.get(control_path(settings)) is None:
        read_status(api, settings, _given(args))  # Refused when no controller has written a status
    return settings


CONFLICT_TRIES = 5  # client-go's retry.DefaultRetry makes 5 tries of a conflicting update too


def _spec(api: KubeApi, obj: dict[str, Any], change: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
    """Merge `change(obj)` into the rollout object's spec, guarded by the resourceVersion `obj` was
    read at; on a 409 (the controller's status writes move the resourceVersion too) the object is
    read again and the change made anew from it, as kubectl's retry on conflict does, so what this
    command decides always rests on the spec it writes over. The object's name, as kubectl prints it."""
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

    from upgrader.core.policy.rollout_object import object_name
    from upgrader.kube.api import MERGE, ApiError
    from upgrader.kube.rollout_object import read_rollout, rollout_path

    name = str(obj["metadata"]["name"])
    latest = [obj]

    def write() -> None:
        try:
            patch = {"metadata": {"resourceVersion": latest[0]["metadata"].get("resourceVersion")},
                     "spec": change(latest[0])}
            api.patch(rollout_path(name), patch, MERGE)
        except ApiError as exc:
            if exc.status == 409:
                latest[0] = read_rollout(api, name)
            raise

    conflict = retry_if_exception(lambda e: isinstance(e, ApiError) and e.status == 409)
    Retrying(retry=conflict, stop=stop_after_attempt(CONFLICT_TRIES), wait=wait_random_exponential(0.01, max=0.2),
             reraise=True)(write)
    return object_name(name)


def _legacy_resume(api: KubeApi, args: argparse.Namespace) -> None:
    """A pause an older upgrader kept in its ConfigMaps ends with the object's (the controller carries
    it over until then: docs/operations.md#migrating-from-the-status-configmap): the control
    ConfigMap's `paused`, an older CLI's `paused` key in the status one, or the pause the last status
    recorded once the control ConfigMap is gone. The object's pause has ended already: ConfigMaps this
    user may not read are said on stderr, not a failure."""
    from upgrader.kube.api import ApiError
    from upgrader.kube.snapshot import read_control, status_path

    settings = load_settings(namespace=args.namespace)
    namespaces = [settings.namespace] if _given(args) else list(CONTROLLER_NAMESPACES)
    for namespace in namespaces:
        where = settings.model_copy(update={"namespace": namespace})
        try:
            if not read_control(api, where).paused:
                continue
            _write(api, where, {"paused": "false"})
            status = (api.get(status_path(where)) or {}).get("data") or {}
            if "paused" in status or "resumedAt" in status:
                api.patch(status_path(where), {"data": {"paused": None, "resumedAt": None}})
        except ApiError as exc:
            if exc.status not in (401, 403):
                raise
            print(f"upgrader: could not check configmap {namespace}/{where.control_configmap} for an older pause: "
                  f"{exc.status} {exc.reason}", file=sys.stderr)
            continue
        print(f"resumed the pause carried over from configmap {namespace}/{where.control_configmap}")


def pause(args: argparse.Namespace) -> int:
    def change(api: KubeApi) -> int:
        obj = find_rollout(api, args)
        if obj is not None:
            print(f"paused: no new node starts ({_spec(api, obj, lambda _: {'paused': True})} spec.paused)")
            return 0
        settings = _settings(api, args)
        _write(api, settings, {"paused": "true"})
        print(f"paused: no new node starts (configmap {settings.namespace}/{settings.control_configmap})")
        return 0

    return _guarded("pause", change, args)


def resume(args: argparse.Namespace) -> int:
    def change(api: KubeApi) -> int:
        from upgrader.kube.snapshot import status_path

        obj = find_rollout(api, args)
        if obj is not None:
            _spec(api, obj, lambda _: {"paused": False})
            _legacy_resume(api, args)
            acknowledged = _acknowledged_on(obj)
        else:
            settings = _settings(api, args)
            _write(api, settings, {"paused": "false"})
            # An older CLI kept the pause (and a clock-stamped acknowledgement) in the status: gone too.
            status = (api.get(status_path(settings)) or {}).get("data") or {}
            if "paused" in status or "resumedAt" in status:
                api.patch(status_path(settings), {"data": {"paused": None, "resumedAt": None}})
            acknowledged = _acknowledged(api, settings)
        failed = _failed_nodes(api)
        print("resumed: new nodes may start; failures are not acknowledged by resume")
        waiting = [n for n in failed if acknowledged.get(n["name"]) != n["failed_at"]]
        if waiting:
            names = ", ".join(n["name"] for n in waiting)
            print(f"still upgrade-failed, not acknowledged: {names} (`upgrader acknowledge <node>`)")
        return 0

    return _guarded("resume", change, args)


def acknowledge(args: argparse.Namespace) -> int:
    if bool(args.nodes) == bool(args.all):
        raise UsageError("acknowledge: name the failed nodes, or give --all (not both)")

    def change(api: KubeApi) -> int:
        obj = find_rollout(api, args)
        settings = _settings(api, args) if obj is None else None
        failed = {n["name"]: n for n in _failed_nodes(api)}
        wanted = sorted(failed) if args.all else list(dict.fromkeys(args.nodes))
        if not wanted:
            raise Refused("no node is upgrade-failed: nothing to acknowledge")
        for name in wanted:
            if name not in failed:
                raise Refused(f"node {name} is not upgrade-failed (nothing written)")
            if not failed[name]["failed_at"]:
                raise Refused(
                    f"node {name} has no failure recorded yet ({FAILED_AT}): the controller records it on its next "
                    "pass (nothing written)"
                )
        def acknowledged(kept: dict[str, str]) -> dict[str, str]:
            current = {k: v for k, v in kept.items() if k in failed}  # drop recovered nodes
            current.update({name: failed[name]["failed_at"] for name in wanted})
            return current

        if obj is not None:
            _spec(api, obj, lambda latest: {"acknowledgedFailures": [
                {"node": node, "failedAt": at} for node, at in sorted(acknowledged(_acknowledged_on(latest)).items())]})
        elif settings is not None:
            current = acknowledged(_acknowledged(api, settings))
            _write(api, settings, {"acknowledged": json.dumps(current, sort_keys=True)})
        for name in wanted:
            node = failed[name]
            where = f" in {node['state']}" if node["state"] else ""
            print(f"acknowledged {name}: upgrade-failed{where} at {node['failed_at']}: {node['reason']}")
        return 0

    return _guarded("acknowledge", change, args)


def _acknowledged_on(obj: dict[str, Any]) -> dict[str, str]:
    from upgrader.core.policy.rollout_object import read_intent

    return dict(read_intent(str(obj["metadata"]["name"]), obj).acknowledged)


def _acknowledged(api: KubeApi, settings: Settings) -> dict[str, str]:
    from upgrader.kube.snapshot import ACKNOWLEDGED_KEY, control_path, parse_acknowledged

    data = (api.get(control_path(settings)) or {}).get("data") or {}
    return parse_acknowledged(data.get(ACKNOWLEDGED_KEY))


def _failed_nodes(api: KubeApi) -> list[dict[str, Any]]:
    """The upgrade-failed nodes and their failure, as the controller recorded it on them."""
    items = api.list("/api/v1/nodes", label_selector=f"{STATE_LABEL}={State.FAILED.value}").get("items", [])
    out = []
    for item in items:
        meta = item.get("metadata") or {}
        notes = meta.get("annotations") or {}
        out.append(
            {
                "name": str(meta.get("name", "")),
                "failed_at": str(notes.get(FAILED_AT, "")),
                "state": str(notes.get(FAILED_STATE, "")),
                "reason": str(notes.get(FAILED_REASON, "(no reason recorded)")),
            }
        )
    return sorted(out, key=lambda n: n["name"])

