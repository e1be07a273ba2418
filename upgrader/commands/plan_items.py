"""The check every item of a `plan --from-file` kubectl List goes through: what makes one unreadable
(as the API server would never send it), in the words of the one-line error that names it."""

from __future__ import annotations

from typing import Any

from upgrader.core.model.input_errors import printable


def show(value: Any) -> str:
    """A value from the file as it can sit in a one-line message: its type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _all_strings(values: dict[Any, Any]) -> bool:
    """Every key and value a string (as the API server writes labels): one C-level pass each, where
    the item-by-item check below would cost a third of a second per 150,000 pods."""
    try:
        "".join(values)
        "".join(values.values())
    except TypeError:
        return False
    return True


def item_problem(item: Any) -> str | None:
    """What makes one item of a kubectl List unreadable (as the API server would never send it)."""
    if not isinstance(item, dict):
        return f"is {type(item).__name__}, not an object"
    kind = item.get("kind")
    if kind is None:
        return "has no kind"
    if not isinstance(kind, str):
        return f"has kind that is not a string ({show(kind)})"
    meta = item.get("metadata")
    if not isinstance(meta, dict):
        what = "no metadata" if meta is None else f"metadata that is not a map ({type(meta).__name__})"
        return f"({printable(kind)}) has {what}"
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        return f"({printable(kind)}) has no metadata.name"
    problem = _field_problem(item, meta)
    return None if problem is None else f"({printable(kind)} {printable(meta['name'])}) has {problem}"


def _field_problem(item: dict[str, Any], meta: dict[str, Any]) -> str | None:
    """`item_problem` of a named item's fields, run on every item of the file: the common case
    (every field as the API server writes it) costs a few lookups."""
    namespace = meta.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        return f"metadata.namespace that is not a string ({show(namespace)})"
    version = item.get("apiVersion")
    if version is not None and not isinstance(version, str):
        return f"apiVersion that is not a string ({show(version)})"
    for part in ("spec", "status"):
        value = item.get(part)
        if value is not None and not isinstance(value, dict):
            return f"{part} that is not a map ({type(value).__name__})"
    for key, singular in (("labels", "label"), ("annotations", "annotation")):
        values = meta.get(key)
        if not values and (values is None or isinstance(values, dict)):
            continue
        if not isinstance(values, dict):
            return f"metadata.{key} that is not a map"
        if _all_strings(values):
            continue
        for k, v in values.items():
            if not isinstance(k, str):
                return f"{singular} key {k!r} that is not a string"
            if not isinstance(v, str):
                return f"{singular} {k!r} whose value is not a string ({show(v)}); {key} hold strings"
    return None
