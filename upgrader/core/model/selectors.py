"""Kubernetes label and field selectors: parse once, match many times.

Shared by the controller's decision code and the emulator, so both read a selector the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# A label key: optional DNS subdomain prefix (at most 253 characters) and a name of at most 63.
_KEY = r"(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?[a-zA-Z0-9](?:[-a-zA-Z0-9_.]*[a-zA-Z0-9])?"
_VALUE = r"(?:[a-zA-Z0-9](?:[-a-zA-Z0-9_.]*[a-zA-Z0-9])?)?"
_KEY_RE = re.compile(rf"^{_KEY}$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")
_SET_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*([<>])\s*(-?[0-9]+)\s*$")
MAX_NAME, MAX_PREFIX, MAX_VALUE = 63, 253, 63


def valid_key(key: str) -> bool:
    """A qualified name, as label keys must be (`prefix/name`, lengths included)."""
    prefix, _, name = key.rpartition("/")
    return bool(_KEY_RE.match(key)) and len(name) <= MAX_NAME and len(prefix) <= MAX_PREFIX


def valid_value(value: str) -> bool:
    return bool(_VALUE_RE.match(value)) and len(value) <= MAX_VALUE


class SelectorError(ValueError):
    """A selector that does not parse; the message names the offending part."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", ">", "<"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op in (">", "<"):
            return has and _compare(value, self.op, next(iter(self.values)))
        if self.op == "=":
            return has and value in self.values
        if self.op == "!=":
            return not has or value not in self.values
        if self.op == "in":
            return has and value in self.values
        if self.op == "notin":
            return not has or value not in self.values
        if self.op == "exists":
            return has
        return not has  # "!"


def _compare(value: str | None, op: str, bound: str) -> bool:
    """`key>N` / `key<N`: both sides must be integers, else the requirement does not match."""
    try:
        have = int(value or "")
    except ValueError:
        return False
    return have > int(bound) if op == ">" else have < int(bound)


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()
    match_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.match_nothing:
            return False
        present = labels or {}
        return all(r.matches(present) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.match_nothing

    def __str__(self) -> str:
        parts = []
        for r in self.requirements:
            if r.op in ("=", "!=", ">", "<"):
                parts.append(f"{r.key}{r.op}{next(iter(r.values))}")
            elif r.op in ("in", "notin"):
                parts.append(f"{r.key} {r.op} ({','.join(sorted(r.values))})")
            elif r.op == "exists":
                parts.append(r.key)
            else:
                parts.append(f"!{r.key}")
        return ",".join(parts)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the string form (`a=b,c!=d,e in (f,g),!h`)."""
    if text is None or not text.strip():
        return LabelSelector()
    requirements = []
    for raw in _split_top_level(text):
        if not raw.strip():
            raise SelectorError(f"invalid label selector {text!r}: empty requirement")
        requirement = _parse_requirement(raw)
        if requirement is None:
            raise SelectorError(f"invalid label selector {text!r}: cannot parse {raw.strip()!r}")
        if not valid_key(requirement.key) or not all(valid_value(v) for v in requirement.values):
            raise SelectorError(f"invalid label selector {text!r}: invalid key or value in {raw.strip()!r}")
        requirements.append(requirement)
    return LabelSelector(tuple(requirements))


def _parse_requirement(raw: str) -> Requirement | None:
    """One comma-separated part of a selector string; None when it does not parse."""
    eq = _EQ_RE.match(raw)
    if eq:
        key, op, value = eq.groups()
        return Requirement(key, "!=" if op == "!=" else "=", frozenset([value]))
    cmp = _CMP_RE.match(raw)
    if cmp:
        key, op, bound = cmp.groups()
        return Requirement(key, op, frozenset([bound]))
    st = _SET_RE.match(raw)
    if not st:
        return None
    bang, key, op, values = st.groups()
    if not op:
        return Requirement(key, "!" if bang else "exists")
    if bang:
        return None  # `!key` takes no values
    # As in the real parser, `in ()` and `in (a,)` hold the empty value.
    return Requirement(key, op, frozenset(v.strip() for v in values.split(",")))


_EXPR_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def from_label_selector_object(obj: Mapping[str, Any] | None) -> LabelSelector:
    """The structured form used by PDBs, DaemonSets and policies (matchLabels/matchExpressions).

    A missing selector (None) selects nothing, as on a PodDisruptionBudget; an empty one
    (`{}`) selects everything.
    """
    if obj is None:
        return LabelSelector(match_nothing=True)
    requirements = []
    for key, value in sorted((obj.get("matchLabels") or {}).items()):
        if not valid_key(str(key)) or not valid_value(str(value)):
            raise SelectorError(f"invalid matchLabels entry {key}={value}")
        requirements.append(Requirement(str(key), "=", frozenset([str(value)])))
    for expr in obj.get("matchExpressions") or []:
        op = _EXPR_OPS.get(expr.get("operator", ""))
        key = str(expr.get("key", ""))
        if op is None or not valid_key(key):
            raise SelectorError(f"invalid matchExpressions entry {expr}")
        values = frozenset(str(v) for v in expr.get("values") or [])
        if op in ("in", "notin") and not values:
            raise SelectorError(f"matchExpressions {key} {expr.get('operator')} needs values")
        requirements.append(Requirement(key, op, values))
    return LabelSelector(tuple(requirements))


def node_selector_matches(node_selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """A pod's or DaemonSet's plain `nodeSelector` map."""
    return all(labels.get(k) == v for k, v in (node_selector or {}).items())


# Field selectors: `path=value`, `path==value`, `path!=value`, comma-separated.
FieldGetter = Callable[[Mapping[str, Any]], str]


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    negate: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negate


# Fields the API server selects on whose Go type is bool: unset reads as "false", not "".
_BOOL_FIELDS = frozenset({"spec.unschedulable", "spec.hostNetwork"})


def field_value(obj: Mapping[str, Any], path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            current = None
            break
        current = current.get(part)
    if current is None:
        return "false" if path in _BOOL_FIELDS else ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_field_selector(text: str | None) -> tuple[FieldRequirement, ...]:
    if text is None or not text.strip():
        return ()
    out = []
    for raw in text.split(","):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", raw)
        if not m:
            raise SelectorError(f"invalid field selector {text!r}: cannot parse {raw.strip()!r}")
        path, op, value = m.groups()
        out.append(FieldRequirement(path, op == "!=", value))
    return tuple(out)
