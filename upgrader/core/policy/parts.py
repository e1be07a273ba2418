"""The policy's parts a pool (core/policy/pool_policy.py) shares with the whole policy (core/policy/policy.py):
failure domains, maintenance windows, the promotion gate and the maxUnavailable budget's form."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from upgrader.core.model.labels import label_key_error, label_value_error
from upgrader.core.model.selectors import SelectorError, parse_label_selector
from upgrader.core.policy.windows import Window, check_cron, check_zone, day_index, days_cron, parse_duration

_PERCENT = re.compile(r"^(\d{1,3})%$")

class _Strict(BaseModel):
    """Integer and boolean knobs are `strict`: only YAML integers and booleans, as the Operator's
    CRD takes them; `timeoutSeconds: false` must not quietly become 0 (wait forever)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

def selector_problem(text: str) -> str | None:
    """Why a label selector string cannot be used, or None: it must parse, and its keys and values
    must be ones a label can have (the parser's own check lets `a..b/c` through)."""
    try:
        selector = parse_label_selector(text)
    except SelectorError as exc:
        return str(exc)
    for requirement in selector.requirements:
        problem = label_key_error(requirement.key)
        if problem is not None:
            return f"invalid label selector {text!r}: label key {requirement.key!r}: {problem}"
        for value in requirement.values if requirement.op not in (">", "<") else ():
            problem = label_value_error(value)
            if problem is not None:
                return f"invalid label selector {text!r}: label value {value!r}: {problem}"
    return None


def _selector(value: Any) -> str:
    text = "" if value is None else str(value)
    problem = selector_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


def _label_key(key: str) -> str:
    problem = label_key_error(key)
    if problem is not None:
        raise ValueError(f"not a valid label key {key!r}: {problem}")
    return key


def _label_value(value: str) -> str:
    """A failure domain is a value of the `labelKey` label: one no node can carry is a typo."""
    problem = label_value_error(value)
    if problem is not None:
        raise ValueError(f"not a valid label value {value!r}: {problem}")
    return value

NO_DOMAIN = "<none>"  # the failure domain of a node without the label


class FailureDomains(_Strict):
    label_key: Annotated[str, AfterValidator(_label_key)] = Field("topology.kubernetes.io/zone", alias="labelKey")
    # domains to go first, in this order; the rest follow sorted
    order: tuple[Annotated[str, AfterValidator(_label_value)], ...] = ()
    canary: Annotated[str, AfterValidator(_label_value)] | None = None  # defaults to the first domain in order
    soak_seconds: int = Field(0, alias="soakSeconds", ge=0, strict=True)
    # Ours: how many nodes of the canary domain go first (a count, or a percentage of the domain,
    # rounded up); the rest of the domain follows once they are done and have soaked. None: the whole
    # domain is the canary, as before. core/rollout/schedule.py `canary_first`
    canary_nodes: int | str | None = Field(None, alias="canaryNodes")

    @field_validator("canary_nodes", mode="before")
    @classmethod
    def _canary_nodes(cls, value: Any) -> int | str | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f'must be a number of nodes or a percentage like "5%", got {value!r}')
        if isinstance(value, int):
            if value < 1:
                raise ValueError(f"must be at least 1 node, got {value}")
            return value
        match = _PERCENT.match(value.strip())
        if not match or not 1 <= int(match.group(1)) <= 100:
            raise ValueError(f'must be a number of nodes or a percentage from "1%" to "100%", got {value!r}')
        return value.strip()

    def domain_of(self, labels: Mapping[str, str]) -> str:
        """The failure domain of a node with these labels (NO_DOMAIN without the label)."""
        return labels.get(self.label_key) or NO_DOMAIN

    def ordered(self, present: Iterable[str]) -> list[str]:
        """The domains `present`, in rollout order: `order` first, the rest sorted, NO_DOMAIN last;
        the canary leads."""
        present = set(present)
        ordered = [d for d in self.order if d in present]
        ordered += sorted(d for d in present if d not in ordered and d != NO_DOMAIN)
        if NO_DOMAIN in present:
            ordered.append(NO_DOMAIN)
        if self.canary and self.canary in ordered:
            ordered.remove(self.canary)
            ordered.insert(0, self.canary)
        return ordered

    def canary_count(self, domain_size: int) -> int | None:
        """How many of the canary domain's `domain_size` nodes go first; None: all of them at once."""
        if self.canary_nodes is None:
            return None
        if isinstance(self.canary_nodes, int):
            count = self.canary_nodes
        else:
            count = math.ceil(int(self.canary_nodes[:-1]) * domain_size / 100)
        return count if count < domain_size else None

    @field_validator("order")
    @classmethod
    def _distinct(cls, order: tuple[str, ...]) -> tuple[str, ...]:
        twice = sorted(domain for domain, n in Counter(order).items() if n > 1)  # not order.count: quadratic
        if twice:
            raise ValueError(f"lists a domain twice: {', '.join(twice)}")
        return order

class PromotionGate(StrEnum):
    """Ours: where the rollout waits for a person (`upgrader promote`) between stages."""

    NONE = "none"
    CANARY = "canary"  # after the canary: its first nodes (failureDomains.canaryNodes), or its domain
    EVERY_DOMAIN = "everyDomain"  # after the canary and after every domain

class MaintenanceWindow(_Strict):
    """When nodes may start: `schedule` (5-field cron, the window's start) or `days` plus `start`
    ("HH:MM"), for `duration` ("4h", "90m", "1h30m"), in `timeZone` (IANA, default UTC)."""

    name: str | None = None
    schedule: str | None = None
    days: tuple[str, ...] | None = None
    start: str | None = None
    duration: str
    time_zone: str = Field("UTC", alias="timeZone")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or not value.isprintable() or len(value) > 63):
            raise ValueError("must be printable text on one line, 1 to 63 characters")
        return value

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        return None if value is None else check_cron(value)

    @field_validator("days")
    @classmethod
    def _days(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None:
            if not value:
                raise ValueError("must name at least one day")
            for day in value:
                day_index(day)
        return value

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> str:
        parse_duration(value)
        return str(value)

    @field_validator("start", mode="before")
    @classmethod
    def _start(cls, value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool):  # YAML 1.1 reads 22:00 as 1320
            raise ValueError(f'must be a quoted time like "22:00" (unquoted, YAML reads it as the number {value})')
        if value is not None:
            days_cron([], str(value))  # HH:MM
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return check_zone(value)

    @model_validator(mode="after")
    def _one_form(self) -> MaintenanceWindow:
        if self.schedule is not None and (self.days is not None or self.start is not None):
            raise ValueError("give either schedule, or days and start, not both")
        if self.schedule is None and (self.days is None or self.start is None):
            raise ValueError("needs schedule (a cron expression), or days and start")
        return self

    def window(self, index: int) -> Window:
        """The pure form; `index` (from 1) names a window the policy did not name."""
        cron = self.schedule or days_cron([day_index(d) for d in self.days or ()], self.start or "")
        return Window(self.name or f"window {index}", cron, parse_duration(self.duration), self.time_zone)


def max_unavailable_value(value: Any) -> int | str:
    """maxUnavailable as the Operator's CRD takes it: a number of nodes, or a percentage like "25%"."""
    if isinstance(value, bool):
        raise ValueError('must be a number of nodes or a percentage like "25%"')
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return value
    text = str(value).strip()
    if text.isdigit():
        return max_unavailable_value(int(text))
    match = _PERCENT.match(text)
    if not match:
        raise ValueError(f'must be a number of nodes or a percentage like "25%", got {value!r}')
    pct = int(match.group(1))
    if not 0 <= pct <= 100:
        raise ValueError(f"percentage must be between 0% and 100%, got {text}")
    return text


def unavailable_nodes(max_unavailable: int | str, total: int) -> int:
    """Scaled like the Operator: percentages of the managed nodes, rounded up. 0 (or 0%) is the
    Operator's "only nodes already unavailable progress"."""
    if isinstance(max_unavailable, int):
        return max_unavailable
    return math.ceil(int(max_unavailable[:-1]) * total / 100)


def distinct_window_names(windows: tuple[MaintenanceWindow, ...]) -> tuple[MaintenanceWindow, ...]:
    names_once([w.name for w in windows if w.name], "window")
    return windows


def names_once(names: list[str], noun: str) -> None:
    """Refuse a list that names the same `noun` twice (a Counter: `names.count` would be quadratic)."""
    twice = sorted(name for name, n in Counter(names).items() if n > 1)
    if twice:
        raise ValueError(f"names a {noun} twice: {', '.join(twice)}")


def list_or_none(value: Any, noun: str) -> Any:
    """A list key before validation: a list, or nothing (YAML null: none); anything else is refused."""
    if value is not None and not isinstance(value, list | tuple):
        raise ValueError(f"must be a list of {noun}s, got {type(value).__name__}")
    return () if value is None else value
