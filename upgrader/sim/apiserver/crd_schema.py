"""Custom resources checked against their CRD's structural schema, as kube-apiserver checks them.

Pruning first (fields the schema does not declare are dropped, unless
`x-kubernetes-preserve-unknown-fields`; nulls of fields that are not `nullable` too), or, when the
request asks `fieldValidation=Strict` (kubectl's default), an unknown field is a 400 in the words of
apimachinery's strict decoding. Then the OpenAPI v3 validations a structural schema may carry: type,
enum, minimum/maximum, pattern, length and item bounds, required, `x-kubernetes-int-or-string`,
`anyOf`/`oneOf`/`allOf`/`not`, set and map lists. Each refusal reads as kube-apiserver's field errors
(`spec.maxParallelUpgrades: Invalid value: -1: spec.maxParallelUpgrades in body should be greater
than or equal to 0`), all of them in one 422. CEL rules (`x-kubernetes-validations`) are not
evaluated: the CRDs this project ships carry none.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.registry import ResourceType

Obj = dict[str, Any]
_ROOT_KEPT = ("apiVersion", "kind", "metadata")  # the root fields every object has: never pruned


@dataclass
class Findings:
    errors: list[tuple[str, str]] = field(default_factory=list)  # (field path, error body)
    unknown: list[str] = field(default_factory=list)  # field paths the schema does not declare


def admit(rtype: ResourceType, obj: Obj, strict: bool = False) -> Obj:
    """The object as stored: pruned, or refused (400 for an unknown field under `strict`, 422 for
    a value the schema refuses)."""
    schema = rtype.schema or {}
    found = Findings()
    kept = {k: obj[k] for k in _ROOT_KEPT if k in obj}
    rest = {k: v for k, v in obj.items() if k not in _ROOT_KEPT}
    pruned = _walk({**schema, "properties": schema.get("properties") or {}}, rest, "", found)
    if strict and found.unknown:
        shown = ", ".join(f'unknown field "{p}"' for p in found.unknown)
        raise errors.bad_request(
            f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
            f"strict decoding error: {shown}"
        )
    if found.errors:
        raise _invalid(rtype, str((obj.get("metadata") or {}).get("name") or ""), found.errors)
    return {**kept, **(pruned if isinstance(pruned, dict) else {})}


def _invalid(rtype: ResourceType, name: str, found: list[tuple[str, str]]) -> errors.ApiError:
    lines = list(dict.fromkeys(f"{path}: {body}" for path, body in found))
    kind = f"{rtype.kind}.{rtype.group}" if rtype.group else rtype.kind
    listed = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    details: Obj = {
        "name": name,
        "group": rtype.group,
        "kind": rtype.kind,
        "causes": [{"reason": "FieldValueInvalid", "message": body, "field": path} for path, body in found],
    }
    return errors.ApiError(422, f'{kind} "{name}" is invalid: {listed}', details=details)


_DROP = object()


def _walk(schema: Obj, value: Any, path: str, found: Findings) -> Any:
    """`value` pruned under `schema`, its errors added to `found`; _DROP for a null to prune."""
    if value is None:
        if schema.get("nullable"):
            return None
        return _DROP
    if not _typed(schema, value, path, found):
        return value
    _check_value(schema, value, path, found)
    for combined in schema.get("allOf") or ():
        _check_value(combined, value, path, found)
    if isinstance(value, dict):
        return _walk_object(schema, value, path, found)
    if isinstance(value, list):
        items = schema.get("items") or {}
        out = [_walk(items, item, f"{path}[{i}]", found) for i, item in enumerate(value)]
        _check_list(schema, [v for v in out if v is not _DROP], path, found)
        return [v for v in out if v is not _DROP]
    return value


def _walk_object(schema: Obj, value: Obj, path: str, found: Findings) -> Obj:
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    out: Obj = {}
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if props is not None and key in props:
            sub: Obj | None = props[key]
        elif isinstance(extra, dict):
            sub = extra
        elif extra is True or preserve or (props is None and not isinstance(extra, dict) and "type" not in schema):
            out[key] = item
            continue
        else:
            found.unknown.append(where)
            continue
        walked = _walk(sub or {}, item, where, found)
        if walked is not _DROP:
            out[key] = walked
    for key in schema.get("required") or ():
        if key not in out:
            found.errors.append((f"{path}.{key}" if path else key, "Required value"))
    _count("properties", len(out), schema, path, found)
    return out


_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    for name, kind in _JSON_TYPES.items():
        if isinstance(value, kind):
            return name
    return "null"


def _typed(schema: Obj, value: Any, path: str, found: Findings) -> bool:
    wanted = schema.get("type")
    actual = _type_of(value)
    if schema.get("x-kubernetes-int-or-string"):
        ok = actual in ("integer", "string")
        wanted = "integer,string"
    elif not wanted:
        return True
    else:
        ok = actual == wanted or (wanted == "number" and actual == "integer")
    if not ok:
        shown = _quote(actual)
        found.errors.append((path, f"Invalid value: {shown}: {path} in body must be of type {wanted}: {shown}"))
    return ok


def _check_value(schema: Obj, value: Any, path: str, found: Findings) -> None:
    """The validations of one schema node that look at the value itself (not its children)."""
    add = found.errors.append
    if "enum" in schema and value not in schema["enum"]:
        listed = ", ".join(_show(v) for v in schema["enum"])
        add((path, f"Unsupported value: {_show(value)}: supported values: {listed}"))
    if isinstance(value, int | float) and not isinstance(value, bool):
        _bounds(schema, value, path, found)
    if isinstance(value, str):
        pattern = schema.get("pattern")
        if pattern is not None and re.search(pattern, value) is None:
            add((path, f"Invalid value: {_show(value)}: {path} in body should match '{pattern}'"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            add((path, f"Too long: may not be more than {schema['maxLength']} bytes"))
        if "minLength" in schema and len(value) < schema["minLength"]:
            least = schema["minLength"]
            add((path, f"Invalid value: {_show(value)}: {path} in body should be at least {least} chars long"))
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if branches:
            fits = sum(1 for branch in branches if not _errors_under(branch, value, path))
            if fits == 0 or (key == "oneOf" and fits > 1):
                found.errors.extend(e for branch in branches[:1] for e in _errors_under(branch, value, path))
                if fits:
                    add((path, f"Invalid value: {_show(value)}: {path} in body must match exactly one schema in oneOf"))
    if "not" in schema and not _errors_under(schema["not"], value, path):
        add((path, f"Invalid value: {_show(value)}: {path} in body must not validate the schema (not)"))


def _bounds(schema: Obj, value: float, path: str, found: Findings) -> None:
    shown = _show(value)
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and (value < low or (schema.get("exclusiveMinimum") and value == low)):
        strict = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
        found.errors.append((path, f"Invalid value: {shown}: {path} in body should be {strict} {_show(low)}"))
    if high is not None and (value > high or (schema.get("exclusiveMaximum") and value == high)):
        strict = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
        found.errors.append((path, f"Invalid value: {shown}: {path} in body should be {strict} {_show(high)}"))
    step = schema.get("multipleOf")
    if step and not math.isclose(value / step, round(value / step)):
        found.errors.append((path, f"Invalid value: {shown}: {path} in body should be a multiple of {_show(step)}"))


def _check_list(schema: Obj, items: list[Any], path: str, found: Findings) -> None:
    _count("items", len(items), schema, path, found)
    kind = schema.get("x-kubernetes-list-type")
    if kind == "set":
        seen: set[str] = set()
        for i, item in enumerate(items):
            key = json.dumps(item, sort_keys=True)
            if key in seen:
                found.errors.append((f"{path}[{i}]", f"Duplicate value: {_show(item)}"))
            seen.add(key)
    elif kind == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or ()
        seen_keys: set[str] = set()
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            key = json.dumps({k: item.get(k) for k in keys}, sort_keys=True)
            if key in seen_keys:
                found.errors.append((f"{path}[{i}]", f"Duplicate value: {key}"))
            seen_keys.add(key)


def _count(what: str, n: int, schema: Obj, path: str, found: Findings) -> None:
    most, least = schema.get(f"max{what.title()}"), schema.get(f"min{what.title()}")
    if most is not None and n > most:
        found.errors.append((path, f"Too many: {n}: must have at most {most} {what}"))
    if least is not None and n < least:
        found.errors.append((path, f"Invalid value: {n}: {path} in body should have at least {least} {what}"))


def _errors_under(schema: Obj, value: Any, path: str) -> list[tuple[str, str]]:
    found = Findings()
    if _typed(schema, value, path, found):
        _check_value(schema, value, path, found)
    return found.errors


def _show(value: Any) -> str:
    """A bad value as Go's field errors print it: strings quoted, numbers and booleans bare."""
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True)


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
