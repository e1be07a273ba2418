"""Kubernetes label and field selectors: parse once, match many times.

Shared by the controller's decision code and the emulator, so both read a selector the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# A label key: optional DNS prefix and a name of at most 63 characters.
_KEY = r"(?:[a-z0-9A-Z](?:[-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-zA-Z0-9](?:[-a-zA-Z0-9_.]*[a-zA-Z0-9])?"
_VALUE = r"(?:[a-zA-Z0-9](?:[-a-zA-Z0-9_.]*[a-zA-Z0-9])?)?"
_KEY_RE = re.compile(rf"^{_KEY}$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")
_SET_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")


class SelectorError(ValueError):
    """A selector that does not parse; the message names the offending part."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
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
            if r.op in ("=", "!="):
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
        eq = _EQ_RE.match(raw)
        if eq:
            key, op, value = eq.groups()
            requirements.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
            continue
        st = _SET_RE.match(raw)
        if not st:
            raise SelectorError(f"invalid label selector {text!r}: cannot parse {raw.strip()!r}")
        bang, key, op, values = st.groups()
        if op:
            if bang:
                raise SelectorError(f"invalid label selector {text!r}: '!' cannot take values")
            items = [v.strip() for v in values.split(",")]
            if any(not _VALUE_RE.match(v) for v in items) or items == [""]:
                raise SelectorError(f"invalid label selector {text!r}: bad values in {raw.strip()!r}")
            requirements.append(Requirement(key, op, frozenset(items)))
        else:
            requirements.append(Requirement(key, "!" if bang else "exists"))
    return LabelSelector(tuple(requirements))


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
        if not _KEY_RE.match(str(key)) or not _VALUE_RE.match(str(value)):
            raise SelectorError(f"invalid matchLabels entry {key}={value}")
        requirements.append(Requirement(str(key), "=", frozenset([str(value)])))
    for expr in obj.get("matchExpressions") or []:
        op = _EXPR_OPS.get(expr.get("operator", ""))
        key = str(expr.get("key", ""))
        if op is None or not _KEY_RE.match(key):
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


def field_value(obj: Mapping[str, Any], path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
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
