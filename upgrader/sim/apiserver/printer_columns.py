"""Table responses for custom resources: their CRD's additionalPrinterColumns, as kube-apiserver's
table convertor builds them (Name first; a `date` column shown as an age; no columns given: Name
and Age). Built-in kinds keep their own tables (tables.py)."""

from __future__ import annotations

import re
from typing import Any

from upgrader.sim.apiserver import tables
from upgrader.sim.apiserver.clock import parse_rfc3339
from upgrader.sim.apiserver.registry import ResourceType

Obj = dict[str, Any]
_STEP = re.compile(r"""\.([A-Za-z0-9_-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*["']([^"']*)["']\)\]""")
_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def render(rtype: ResourceType, items: list[Obj], now: float, list_meta: Obj, include: str = "Metadata") -> Obj:
    """The Table of `items`: the kind's own for a built-in type, the printer columns for a CR."""
    if not rtype.custom:
        return tables.render(rtype.kind, items, now, list_meta, include)
    columns = [dict(c) for c in rtype.printer_columns] or [_AGE_COLUMN]
    rows = []
    for obj in items:
        row: Obj = {"cells": [obj["metadata"]["name"], *(_cell(c, obj, now) for c in columns)]}
        row_obj = tables.row_object(obj, include)
        if row_obj is not None:
            row["object"] = row_obj
        rows.append(row)
    name_help = "Name must be unique within a namespace."
    definitions = [{"name": "Name", "type": "string", "format": "name", "description": name_help, "priority": 0}]
    for c in columns:
        definitions.append(
            {
                "name": c["name"],
                "type": "string" if c.get("type") == "date" else c.get("type", "string"),
                "format": c.get("format", ""),
                "description": c.get("description", ""),
                "priority": int(c.get("priority", 0)),
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": definitions,
        "rows": rows,
    }


def _cell(column: Obj, obj: Obj, now: float) -> Any:
    value = find(obj, str(column.get("jsonPath", "")))
    if value is None:
        return None  # kubectl shows <none>
    if column.get("type") == "date":
        try:
            return tables.human_duration(now - parse_rfc3339(str(value)))
        except ValueError:
            return str(value)
    if column.get("type") in ("integer", "number") and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if column.get("type") == "boolean" and isinstance(value, bool):
        return value
    return value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def find(obj: Any, path: str) -> Any:
    """The first value a simple JSONPath (`.a.b`, `.a[0]`, `.a[?(@.type=="Ready")].status`) finds."""
    at, pos = obj, 0
    text = path.strip().removeprefix("{").removesuffix("}")
    while pos < len(text):
        step = _STEP.match(text, pos)
        if step is None:
            return None
        pos = step.end()
        key, index, attr, wanted = step.groups()
        if key is not None:
            at = at.get(key) if isinstance(at, dict) else None
        elif index is not None:
            at = at[int(index)] if isinstance(at, list) and int(index) < len(at) else None
        elif isinstance(at, list):
            at = next((i for i in at if isinstance(i, dict) and str(find(i, "." + attr)) == wanted), None)
        else:
            at = None
        if at is None:
            return None
    return at
