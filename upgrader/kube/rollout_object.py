"""Reading and writing the DriverRollout object (deploy/crd.yaml): one GET a pass, the status
through its status subresource, the spec (pause, resume, acknowledge) by a merge patch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from upgrader.core.policy.rollout_object import GROUP, PLURAL, RESOURCE, VERSION, object_name
from upgrader.kube.api import JSON_PATCH, MERGE, ApiError, KubeApi

Obj = dict[str, Any]
GROUP_VERSION_PATH = f"/apis/{GROUP}/{VERSION}"


def rollout_path(name: str) -> str:
    return f"{GROUP_VERSION_PATH}/{PLURAL}/{name}"


class RolloutMissing(Exception):
    """The object (or its CRD) is not there: the message says which, and what installs it."""


def read_rollout(api: KubeApi, name: str) -> Obj:
    """The object; RolloutMissing when the cluster does not serve the CRD or has no such object."""
    found = api.get(rollout_path(name))
    if found is not None:
        return found
    if api.get(GROUP_VERSION_PATH) is None:
        raise RolloutMissing(
            f"the cluster does not serve {RESOURCE} (kubectl apply -f deploy/crd.yaml), "
            "or give --policy FILE instead"
        )
    raise RolloutMissing(f"{object_name(name)} not found (kubectl apply -f deploy/rollout.yaml)")


def write_rollout_status(api: KubeApi, name: str, status: Mapping[str, Any]) -> Obj:
    """The whole status, replaced (`add` replaces): a merge patch would keep keys the new one lacks."""
    ops = [{"op": "add", "path": "/status", "value": dict(status)}]
    return api.patch(f"{rollout_path(name)}/status", ops, JSON_PATCH)


def patch_rollout_spec(api: KubeApi, name: str, spec: Mapping[str, Any]) -> Obj:
    """A merge patch of spec (`upgrader pause`, `resume`, `acknowledge`); ApiError as the server said."""
    try:
        return api.patch(rollout_path(name), {"spec": dict(spec)}, MERGE)
    except ApiError as exc:
        if exc.status == 404:
            raise RolloutMissing(f"{object_name(name)} not found") from None
        raise
