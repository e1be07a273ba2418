"""The OpenAPI v3 documents kube-apiserver publishes at `/openapi/v3`, from Kubernetes' own schemas.

kubectl reads them to explain a field, to build the strategic merge patch of a client-side
`apply` of a built-in kind, and, before any write, to learn from the PATCH operations' query
parameters that the server checks fields itself (`fieldValidation`); without them every
`kubectl apply` fails with "failed to download openapi". The built-in kinds' schemas are the
Kubernetes 1.32 definitions the kubernetes-validate package ships, turned from JSON Schema into
OpenAPI 3.0; a CRD's openAPIV3Schema is published as kube-apiserver publishes it (TypeMeta and the
ObjectMeta reference put in, a List schema beside it). The root lists one document per group-version,
each URL carrying a hash of that document's content so that a client's cache can tell a change.

The 1.32 definitions are read and converted once per process, on the first request for them;
documents are cached by the content of the types they describe, so a CRD change makes a new one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from upgrader.sim.apiserver.registry import Registry

Obj = dict[str, Any]
SCHEMAS_VERSION = "v1.32.0-local"  # the kubernetes-validate schema set matching the emulated 1.32
REF = "#/components/schemas/"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
# The schemas every group-version's operations refer to, besides the kinds'.
OPERATION_SCHEMAS = (f"{META}DeleteOptions", f"{META}Status", f"{META}Patch")
CUSTOM_PATCH_TYPES: tuple[str, ...] = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
)
# Strategic merge patch is advertised for built-in kinds only, as kube-apiserver does; the emulator
# refuses it for custom resources (415), as kube-apiserver does.
BUILTIN_PATCH_TYPES: tuple[str, ...] = (*CUSTOM_PATCH_TYPES, "application/strategic-merge-patch+json")


@dataclass(frozen=True)
class Definitions:
    """Kubernetes' built-in schemas as OpenAPI v3 `components.schemas` entries."""

    schemas: dict[str, Obj]
    refs: dict[str, frozenset[str]]  # schema name -> the names its `$ref`s point at
    by_gvk: dict[tuple[str, str, str], str]  # (group, version, kind) -> schema name

    def closure(self, names: set[str]) -> set[str]:
        """`names` and every schema they refer to, directly or not."""
        seen: set[str] = set()
        todo = [n for n in names if n in self.schemas]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self.refs.get(name, ()))
        return seen


def source_path() -> Path:
    """The kubernetes-validate file the built-in schemas are read from."""
    # find_spec does not import the package (its __init__ pulls in jsonschema): only its files are read.
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or spec.origin is None:
        raise RuntimeError("the kubernetes-validate package (Kubernetes' schemas) is not installed")
    return Path(spec.origin).parent / "kubernetes-json-schema" / SCHEMAS_VERSION / "_definitions.json"


@functools.cache
def definitions() -> Definitions:
    """The 1.32 definitions, converted (built on first use, in some 20 ms)."""
    source = json.loads(source_path().read_text())["$defs"]
    schemas: dict[str, Obj] = {}
    refs: dict[str, frozenset[str]] = {}
    by_gvk: dict[tuple[str, str, str], str] = {}
    for name, raw in source.items():
        found: set[str] = set()
        schema = _convert(raw, found)
        for field in ("apiVersion", "kind"):
            # kubernetes-validate pins these with an enum; kube-apiserver publishes none.
            (schema.get("properties") or {}).get(field, {}).pop("enum", None)
        if name == INT_OR_STRING:
            schema.update({"format": "int-or-string", "x-kubernetes-int-or-string": True})
        schemas[name], refs[name] = schema, frozenset(found)
        for gvk in schema.get("x-kubernetes-group-version-kind") or ():
            by_gvk.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)
    return Definitions(schemas, refs, by_gvk)


def _convert(schema: Obj, refs: set[str]) -> Obj:
    """A JSON Schema (2020-12, nullable types, `#/$defs` refs) as the OpenAPI 3.0 schema kube-apiserver
    serves: `["string", "null"]` is "string", and a `$ref` with siblings is wrapped in `allOf`,
    since OpenAPI 3.0 ignores a reference's siblings."""
    out: Obj = {}
    for key, value in schema.items():
        if key == "$ref":
            continue
        if key == "type" and isinstance(value, list):
            out[key] = next((t for t in value if t != "null"), "object")
        elif key == "properties":  # its keys are field names (JSONSchemaProps has one named "$ref")
            out[key] = {field: _convert(sub, refs) for field, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = _convert(value, refs)
        elif key in ("oneOf", "anyOf", "allOf"):
            out[key] = [_convert(sub, refs) for sub in value]
        else:
            out[key] = value
    if "$ref" not in schema:
        return out
    name = schema["$ref"].rsplit("/", 1)[-1]
    refs.add(name)
    return {"allOf": [{"$ref": REF + name}], **out} if out else {"$ref": REF + name}


# ----- the documents ----------------------------------------------------------------------------


def document(parts: list[str], registry: Registry) -> Obj | None:
    """The document at `/openapi/<parts>`: the v3 root or a group-version's; None for any other
    (v2 is not served: kubectl asks for it in protobuf only, and does without it once v3 is there)."""
    if parts == ["v3"]:
        paths = {}
        for group, version in _group_versions(registry):
            _, digest = _group_version_document(_spec_key(registry, group, version))
            path = _api_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
        return {"paths": paths}
    if parts[:1] != ["v3"]:
        return None
    wanted = "/".join(parts[1:])
    for group, version in _group_versions(registry):
        if _api_path(group, version) == wanted:
            return _group_version_document(_spec_key(registry, group, version))[0]
    return None


def _group_versions(registry: Registry) -> list[tuple[str, str]]:
    core = [("", "v1")] if registry.in_group_version("", "v1") else []
    return core + [(g, v) for g, versions in sorted(registry.group_versions().items()) for v in versions]


def _api_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _spec_key(registry: Registry, group: str, version: str) -> str:
    """What a group-version's document is built from, as JSON: its cache key, and a private copy
    of the CRD schemas for the document to hold."""
    types = [
        {
            "plural": t.plural,
            "kind": t.kind,
            "list_kind": t.list_kind_name(),
            "namespaced": t.namespaced,
            "verbs": list(t.verbs),
            "subresources": list(t.subresources),
            "schema": t.schema,
        }
        for t in registry.in_group_version(group, version)
    ]
    return json.dumps({"group": group, "version": version, "types": types}, sort_keys=True)


@functools.lru_cache(maxsize=64)
def _group_version_document(key: str) -> tuple[Obj, str]:
    """A group-version's document and the hash of its content (upper-case SHA-512 hex, as
    kube-apiserver's)."""
    spec = json.loads(key)
    group, version = spec["group"], spec["version"]
    defs = definitions()
    wanted = set(OPERATION_SCHEMAS)
    published: dict[str, Obj] = {}
    paths: dict[str, Obj] = {}
    for t in spec["types"]:
        name = defs.by_gvk.get((group, version, t["kind"])) if t["schema"] is None else None
        if name is not None:
            list_name = defs.by_gvk.get((group, version, t["list_kind"]), f"{META}List")
            wanted |= {name, list_name}
            patch_types = BUILTIN_PATCH_TYPES
        else:
            # A CRD's type, or a kind 1.32 has no schema for (the NVIDIA kinds the emulator builds
            # in are CRDs on a real cluster): published as kube-apiserver publishes a CRD's.
            name = f"{_reversed(group)}.{version}.{t['kind']}"
            list_name = f"{name}List"
            schema = t["schema"] or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            published[name] = _custom_schema(schema, group, version, t["kind"])
            published[list_name] = _custom_list_schema(name, group, version, t)
            wanted |= {f"{META}ObjectMeta", f"{META}ListMeta"}
            patch_types = CUSTOM_PATCH_TYPES
        paths.update(_paths(group, version, t, name, list_name, patch_types))
    schemas = {n: defs.schemas[n] for n in sorted(defs.closure(wanted))}
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.4"},
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": {**schemas, **published},
            "securitySchemes": {
                "BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"},
            },
        },
    }
    digest = hashlib.sha512(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return doc, digest.upper()


def _reversed(group: str) -> str:
    """A CRD group as kube-apiserver names its schemas: gpu-upgrader.io -> io.gpu-upgrader."""
    return ".".join(reversed(group.split(".")))


def _type_meta() -> Obj:
    """apiVersion and kind, described in Kubernetes' own words (taken from a built-in kind)."""
    props = definitions().schemas["io.k8s.api.core.v1.Pod"]["properties"]
    return {"apiVersion": props["apiVersion"], "kind": props["kind"]}


def _meta_ref(kind: str, description_from: str) -> Obj:
    described = definitions().schemas[description_from]["properties"]["metadata"]
    return {"allOf": [{"$ref": REF + META + kind}], "description": described.get("description", "")}


def _custom_schema(schema: Obj, group: str, version: str, kind: str) -> Obj:
    props = {
        **(schema.get("properties") or {}),
        **_type_meta(),
        "metadata": _meta_ref("ObjectMeta", "io.k8s.api.core.v1.Pod"),
    }
    gvk = [{"group": group, "kind": kind, "version": version}]
    return {**schema, "properties": props, "x-kubernetes-group-version-kind": gvk}


def _custom_list_schema(item: str, group: str, version: str, t: Obj) -> Obj:
    items = {
        "description": f"List of {t['plural']}. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md",
        "items": {"$ref": REF + item},
        "type": "array",
    }
    return {
        "description": f"{t['list_kind']} is a list of {t['kind']}",
        "properties": {**_type_meta(), "items": items, "metadata": _meta_ref("ListMeta", "io.k8s.api.core.v1.PodList")},
        "required": ["items"],
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": group, "kind": t["list_kind"], "version": version}],
    }


# ----- paths: what kubectl reads of them is the PATCH operations' GVK, parameters and body types


def _paths(group: str, version: str, t: Obj, name: str, list_name: str, patch_types: tuple[str, ...]) -> Obj:
    gvk = {"group": group, "kind": t["kind"], "version": version}
    verbs = set(t["verbs"])
    scope = "Namespaced" if t["namespaced"] else ""
    ident = f"{_camel(group)}{version.capitalize()}{scope}{t['kind']}"
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    collection = prefix + ("/namespaces/{namespace}" if t["namespaced"] else "") + f"/{t['plural']}"
    item = collection + "/{name}"
    path_params = [_param("namespace", "path")] if t["namespaced"] else []
    writes = [_param("dryRun"), _param("fieldManager"), _param("fieldValidation")]
    patch_params = [*writes, _param("force", kind="boolean")]  # fieldValidation here: kubectl leaves checks to us
    list_params = [_param("labelSelector"), _param("watch", kind="boolean")]
    patch_body = {ct: {"schema": {"$ref": f"{REF}{META}Patch"}} for ct in patch_types}

    def op(action: str, op_id: str, response: str, params: list[Obj] | None = None, body: Obj | None = None) -> Obj:
        out: Obj = {
            "operationId": op_id,
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": REF + response}}}},
                "401": {"description": "Unauthorized"},
            },
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        }
        if params:
            out["parameters"] = params
        if body is not None:
            out["requestBody"] = {"content": body, "required": True}
        return out

    object_body = {"*/*": {"schema": {"$ref": REF + name}}}
    listed: Obj = {"parameters": path_params}
    if "list" in verbs:
        listed["get"] = op("list", f"list{ident}", list_name, list_params)
    if "create" in verbs:
        listed["post"] = op("post", f"create{ident}", name, writes, object_body)
    if "deletecollection" in verbs:
        listed["delete"] = op("deletecollection", f"deletecollection{ident}", f"{META}Status")
    out = {collection: listed}
    for sub in ("", *t["subresources"]):
        suffix, label = (f"/{sub}", sub.capitalize()) if sub else ("", "")
        one: Obj = {"parameters": [_param("name", "path"), *path_params]}
        if "get" in verbs:
            one["get"] = op("get", f"read{ident}{label}", name)
        if "update" in verbs:
            one["put"] = op("put", f"replace{ident}{label}", name, writes, object_body)
        if "patch" in verbs:
            one["patch"] = op("patch", f"patch{ident}{label}", name, patch_params, patch_body)
        if "delete" in verbs and not sub:
            one["delete"] = op("delete", f"delete{ident}", f"{META}Status", [_param("dryRun")])
        out[item + suffix] = one
    return out


def _param(name: str, where: str = "query", kind: str = "string") -> Obj:
    param: Obj = {"name": name, "in": where, "schema": {"type": kind, "uniqueItems": True}}
    if where == "path":
        param["required"] = True
    return param


def _camel(group: str) -> str:
    """An operation ID's group part, as Kubernetes spells it: "" -> Core, rbac.authorization.k8s.io
    -> RbacAuthorization, gpu-upgrader.io -> GpuUpgraderIo."""
    if not group:
        return "Core"
    return "".join(part.capitalize() for part in re.split(r"[.-]", group.removesuffix(".k8s.io")))

