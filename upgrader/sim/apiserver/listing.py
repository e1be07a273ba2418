"""List requests: selectors, key-ordered filtering, and `limit` / `continue` paging.

A continue token names the last key returned, so a page resumes after it; it is not a
consistent snapshot as on a real server (documented in docs/emulator.md).
"""

from __future__ import annotations

import base64
import json
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from upgrader.core.model.selectors import (
    FieldRequirement,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from upgrader.sim.apiserver import errors

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped


@dataclass
class ListResult:
    items: list[Obj]
    resource_version: str
    continue_token: str | None = None
    remaining: int | None = None


def parse_selectors(
    label_selector: str | None, field_selector: str | None
) -> tuple[LabelSelector, tuple[FieldRequirement, ...]]:
    """Both selectors of a list or watch; a malformed one is a 400."""
    try:
        return parse_label_selector(label_selector), parse_field_selector(field_selector)
    except SelectorError as exc:
        raise errors.bad_request(str(exc)) from exc


@dataclass(frozen=True)
class ListQuery:
    """A parsed list request: the namespace to stay in, the selectors and the page wanted."""

    namespace: str | None  # None or "" for every namespace (and for cluster-scoped types)
    labels: LabelSelector
    fields: tuple[FieldRequirement, ...]
    limit: int = 0
    start: Key | None = None  # resume after this key (from a continue token)
    selected: bool = False  # a selector was given, so what is left cannot be counted

    @classmethod
    def parse(
        cls,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> ListQuery:
        labels, fields = parse_selectors(label_selector, field_selector)
        start = decode_continue(continue_token) if continue_token else None
        selected = bool(label_selector or field_selector)
        return cls(namespace, labels, fields, limit, start, selected)


def equality_value(query: ListQuery, path: str) -> str | None:
    """The value a field selector requires `path` to equal (`spec.nodeName=x`), if it does."""
    return next((f.value for f in query.fields if f.path == path and not f.negate), None)


def select_page(query: ListQuery, bucket: Mapping[Key, Obj], keys: Sequence[Key], rv: str) -> ListResult:
    """The objects `query` selects, in key order, up to its limit (with a continue token if more).

    `keys` are sorted, so a namespace's objects are one slice of them and a page resumes by bisection.
    """
    start, namespace, labels, fields, limit = query.start, query.namespace, query.labels, query.fields, query.limit
    items: list[Obj] = []
    next_key: Key | None = None
    remaining = 0
    first, last = 0, len(keys)
    if namespace:
        first, last = bisect_left(keys, (namespace, "")), bisect_left(keys, (namespace + "\0", ""))
    if start is not None:
        first = max(first, bisect_right(keys, start))
    for index in range(first, last):  # the checks stay inline: this loop runs over every object of large fleets
        key = keys[index]
        obj = bucket[key]
        if not labels.matches(obj["metadata"].get("labels")):
            continue
        if fields and not all(f.matches(obj) for f in fields):
            continue
        if limit and len(items) >= limit:
            # A page is full and more follows. Without a selector every key left is an object left
            # (remainingItemCount); with one the server does not count, so one more match is enough.
            remaining = 1 if query.selected else last - index
            break
        items.append(obj)
        next_key = key
    if limit and remaining and next_key is not None:
        # With a selector the real server cannot count what is left, and leaves the field unset.
        counted = None if query.selected else remaining
        return ListResult(items, rv, encode_continue(rv, next_key), counted)
    return ListResult(items, rv)


def encode_continue(rv: str, key: Key) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": int(rv), "start": list(key)})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def decode_continue(token: str) -> Key:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        ns, name = data["start"]
        return (str(ns), str(name))
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ) from exc
