"""The three patch formats the API server accepts: JSON merge, strategic merge, JSON patch."""

from __future__ import annotations

import copy
from typing import Any

from upgrader.sim.apiserver.errors import ApiError

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

# Lists that strategic merge merges element-wise, by field name: the ones this controller and
# kubectl touch (containers, conditions, volumes, ...). Other lists are replaced, as the real
# server replaces atomic lists: a node's `spec.taints`, a pod's `tolerations` and
# `containerStatuses` have no patch strategy, so a patch carrying one taint drops the others.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
}
# Lists of scalars with patchStrategy merge: a patch adds to them instead of replacing them.
PRIMITIVE_MERGE = frozenset({"finalizers"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge for the fields Kubernetes clients patch in practice.

    Maps merge like JSON merge patch; lists with a known merge key merge element by element
    (`$patch: delete` removes one); `$patch: replace` replaces a map; `$setElementOrder`,
    `$retainKeys` and `$deleteFromPrimitiveList` directives are accepted.
    """
    if not isinstance(patch, dict):
        if isinstance(patch, list) and field in MERGE_KEYS and isinstance(target, list):
            return _merge_list(target, patch, MERGE_KEYS[field])
        if isinstance(patch, list) and field in PRIMITIVE_MERGE and isinstance(target, list):
            return [*target, *(v for v in patch if v not in target)]
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        merged = strategic_merge_patch(result.get(key), value, key)
        if merged is None:
            result.pop(key, None)
        else:
            result[key] = merged
    return result


def _merge_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    result = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            result.append(copy.deepcopy(item))
            continue
        index = next(
            (i for i, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append({k: v for k, v in copy.deepcopy(item).items() if k != "$patch"})
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _missing(parts: list[str]) -> ApiError:
    return ApiError(
        422,
        f"the server rejected our request due to an error in our request: "
        f"path /{'/'.join(parts)} does not exist",
    )


def _index(items: list[Any], part: str, parts: list[str], insert: bool = False) -> int:
    """A JSON pointer's array index: digits only, in range (one past the end to insert)."""
    if not part.isdigit() or (part != "0" and part.startswith("0")):
        raise _missing(parts)
    index = int(part)
    if index > len(items) or (index == len(items) and not insert):
        raise _missing(parts)
    return index


def _container(doc: Any, parts: list[str]) -> Any:
    current = doc
    for i, part in enumerate(parts):
        if isinstance(current, list):
            current = current[_index(current, part, parts[: i + 1])]
        elif isinstance(current, dict) and part in current:
            current = current[part]
        else:
            raise _missing(parts[: i + 1])
    return current


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 add/remove/replace/test/copy/move; a failed `test` is a 422 like the real server."""
    result = copy.deepcopy(doc)
    for op in ops:
        kind = op.get("op")
        parts = _pointer(op.get("path", ""))
        if not parts:
            raise ApiError(422, "json patch on the document root is not supported")
        parent = _container(result, parts[:-1])
        last = parts[-1]
        if kind == "test":
            if isinstance(parent, list):
                actual = parent[_index(parent, last, parts)]
            elif isinstance(parent, dict) and last in parent:
                actual = parent[last]
            else:
                raise _missing(parts)
            if actual != op.get("value"):
                raise ApiError(
                    422,
                    f"the server rejected our request due to an error in our request: "
                    f"testing value {op.get('path')} failed",
                )
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[_index(parent, last, parts)]
            elif isinstance(parent, dict) and last in parent:
                del parent[last]
            else:
                raise ApiError(422, f"unable to remove nonexistent key: {last}")
        elif kind in ("add", "replace", "copy", "move"):
            if kind in ("copy", "move"):
                source = _pointer(op.get("from", ""))
                value = copy.deepcopy(_container(result, source))
                if kind == "move":
                    src_parent = _container(result, source[:-1])
                    if isinstance(src_parent, list):
                        del src_parent[_index(src_parent, source[-1], source)]
                    else:
                        del src_parent[source[-1]]
            else:
                value = copy.deepcopy(op.get("value"))
            if isinstance(parent, list):
                if last == "-" and kind != "replace":
                    parent.append(value)
                elif kind == "replace":
                    parent[_index(parent, last, parts)] = value
                else:
                    parent.insert(_index(parent, last, parts, insert=True), value)
            elif not isinstance(parent, dict):
                raise _missing(parts)
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, f"replace operation does not apply: doc is missing key: {last}")
                parent[last] = value
        else:
            raise ApiError(422, f"unsupported json patch operation {kind!r}")
    return result


def apply_patch(content_type: str, target: dict[str, Any], patch: Any, custom: bool = False) -> dict[str, Any]:
    """Dispatch on the request's Content-Type. A custom resource has no patch strategies to merge
    by, so kube-apiserver refuses strategic merge for it (415), naming the formats it takes."""
    media = content_type.split(";")[0].strip()
    if custom and media == STRATEGIC:
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE}, {APPLY}",
            reason="UnsupportedMediaType",
        )
    if media == MERGE:
        if not isinstance(patch, dict):
            raise ApiError(400, "merge patch body must be a JSON object")
        return merge_patch(target, patch)
    if media == STRATEGIC:
        if not isinstance(patch, dict):
            raise ApiError(400, "strategic merge patch body must be a JSON object")
        return strategic_merge_patch(target, patch)
    if media == JSON_PATCH:
        if not isinstance(patch, list):
            raise ApiError(400, "json patch body must be a JSON array")
        return json_patch(target, patch)
    if media == APPLY:
        # Server-side apply, simplified: the applied configuration merges over the live object.
        if not isinstance(patch, dict):
            raise ApiError(400, "apply patch body must be an object")
        return strategic_merge_patch(target, patch)
    raise ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types "
        f"include: {JSON_PATCH}, {MERGE}, {STRATEGIC}, {APPLY}",
    )
