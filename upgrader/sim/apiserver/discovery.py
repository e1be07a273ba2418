"""API discovery: `/version`, `/api`, `/apis` and the per-group-version resource lists.

kubectl and the Python client read these before anything else (kubectl's drain looks for the
`pods/eviction` subresource here). Documents are built from the store's type registry, so a CRD
shows up as soon as it is registered.
"""

from __future__ import annotations

from typing import Any

from upgrader.sim.apiserver import errors, openapi
from upgrader.sim.apiserver.registry import EVICTION_DISCOVERY, Registry

Obj = dict[str, Any]
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4-upgrader-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def discovery_document(path: str, registry: Registry, server_address: str) -> Obj | None:
    """The discovery document a GET of `path` answers; None when `path` is not a discovery path.

    `path` has no trailing slash ("/" for the root). An unknown group or group-version is a 404, and
    so is an OpenAPI document other than v3's (openapi.py).
    """
    if path == "/version":
        return SERVER_VERSION
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        }
    if path == "/apis":
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_group(registry, g) for g in sorted(registry.group_versions())],
        }
    parts = path.strip("/").split("/")
    if parts == ["api", "v1"]:
        return _resource_list(registry, "", "v1")
    if parts[0] == "apis" and len(parts) == 2:
        if parts[1] not in registry.group_versions():
            raise errors.ApiError(404, "the server could not find the requested resource")
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(registry, parts[1])}
    if parts[0] == "apis" and len(parts) == 3:
        if not registry.in_group_version(parts[1], parts[2]):
            raise errors.ApiError(404, "the server could not find the requested resource")
        return _resource_list(registry, parts[1], parts[2])
    if parts[0] in ("openapi", "swagger.json"):
        document = openapi.document(parts[1:], registry) if parts[0] == "openapi" else None
        if document is None:
            raise errors.ApiError(404, "the server could not find the requested resource")
        return document
    return None


def _group(registry: Registry, group: str) -> Obj:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in registry.group_versions()[group]]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def _resource_list(registry: Registry, group: str, version: str) -> Obj:
    resources: list[Obj] = []
    for rtype in registry.in_group_version(group, version):
        resources.extend(rtype.discovery())
        if rtype.key == ("", "pods"):
            resources.append(dict(EVICTION_DISCOVERY))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
