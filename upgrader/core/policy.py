"""The upgrade policy: the GPU Operator's `driver.upgradePolicy` keys plus upgrader's additions.

Defaults follow the Operator where it has one (maxParallelUpgrades 1, maxUnavailable 25%,
pod deletion and drain timeouts 300 s, drain off, wait-for-completion without timeout); a key left
empty (`drain:` with nothing under it, YAML null) is the Operator's nil spec and takes them all.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from upgrader.core.alert_gate import AlertGate
from upgrader.core.labels import label_key_error, label_value_error
from upgrader.core.notices import Notifications
from upgrader.core.pending_taint_policy import TaintPendingNodes
from upgrader.core.preflight_policy import PreflightPolicy
from upgrader.core.selectors import LabelSelector, SelectorError, parse_label_selector
from upgrader.core.windows import Window, check_cron, check_zone, day_index, days_cron, parse_duration

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


class WaitForCompletion(_Strict):
    pod_selector: str = Field("", alias="podSelector")
    timeout_seconds: int = Field(0, alias="timeoutSeconds", ge=0, strict=True)  # 0: wait forever

    _check = field_validator("pod_selector", mode="before")(_selector)


class GpuPodDeletion(_Strict):
    force: bool = Field(False, strict=True)  # also delete GPU pods no controller would recreate
    timeout_seconds: int = Field(300, alias="timeoutSeconds", ge=0, strict=True)
    delete_empty_dir: bool = Field(False, alias="deleteEmptyDir", strict=True)


class Drain(_Strict):
    enable: bool = Field(False, strict=True)
    force: bool = Field(False, strict=True)
    pod_selector: str = Field("", alias="podSelector")
    timeout_seconds: int = Field(300, alias="timeoutSeconds", ge=0, strict=True)
    delete_empty_dir: bool = Field(False, alias="deleteEmptyDir", strict=True)

    _check = field_validator("pod_selector", mode="before")(_selector)


class FailureDomains(_Strict):
    label_key: Annotated[str, AfterValidator(_label_key)] = Field("topology.kubernetes.io/zone", alias="labelKey")
    # domains to go first, in this order; the rest follow sorted
    order: tuple[Annotated[str, AfterValidator(_label_value)], ...] = ()
    canary: Annotated[str, AfterValidator(_label_value)] | None = None  # defaults to the first domain in order
    soak_seconds: int = Field(0, alias="soakSeconds", ge=0, strict=True)
    # Ours: how many nodes of the canary domain go first (a count, or a percentage of the domain,
    # rounded up); the rest of the domain follows once they are done and have soaked. None: the whole
    # domain is the canary, as before. core/schedule.py `canary_first`
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


class Validation(_Strict):
    pod_selector: str = Field("app=nvidia-operator-validator", alias="podSelector")
    timeout_seconds: int = Field(600, alias="timeoutSeconds", ge=1, strict=True)

    _check = field_validator("pod_selector", mode="before")(_selector)


class PodRestart(_Strict):
    timeout_seconds: int = Field(600, alias="timeoutSeconds", ge=1, strict=True)


class OnBlockedTimeout(StrEnum):
    """A node blocked (PDB, jobs, undeletable pods) past its step's timeout: halt, or fail it."""

    HALT = "halt"
    FAIL = "fail"


class OnNodeFailure(StrEnum):
    """A failed node outside the canary domain: halt the rollout, or go on (canary always halts)."""

    HALT = "halt"
    CONTINUE = "continue"


class PromotionGate(StrEnum):
    """Ours: where the rollout waits for a person (`upgrader promote`) between stages."""

    NONE = "none"
    CANARY = "canary"  # after the canary: its first nodes (failureDomains.canaryNodes), or its domain
    EVERY_DOMAIN = "everyDomain"  # after the canary and after every domain


class OnInsufficientCapacity(StrEnum):
    """The GPU pods a node's upgrade evicts would find no room: start it anyway (plan warns, run
    says so in an Event), or hold it at upgrade-required until room appears."""

    WARN = "warn"
    WAIT = "wait"


class GpuCapacity(_Strict):
    on_insufficient: OnInsufficientCapacity = Field(OnInsufficientCapacity.WARN, alias="onInsufficient")


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


_SECTIONS = (
    "wait_for_completion",
    "gpu_pod_deletion",
    "drain",
    "failure_domains",
    "validation",
    "pod_restart",
    "gpu_capacity",
    "preflight",
    "notifications",
    "taint_pending_nodes",
)


class Policy(_Strict):
    auto_upgrade: bool = Field(True, alias="autoUpgrade", strict=True)
    max_parallel_upgrades: int = Field(1, alias="maxParallelUpgrades", ge=0, strict=True)  # 0: unlimited
    max_unavailable: int | str = Field("25%", alias="maxUnavailable")
    wait_for_completion: WaitForCompletion = Field(WaitForCompletion(), alias="waitForCompletion")
    gpu_pod_deletion: GpuPodDeletion = Field(
        GpuPodDeletion(),
        validation_alias=AliasChoices("gpuPodDeletion", "podDeletion"),
        serialization_alias="gpuPodDeletion",
    )
    drain: Drain = Drain()
    failure_domains: FailureDomains = Field(FailureDomains(), alias="failureDomains")
    validation: Validation = Validation()
    pod_restart: PodRestart = Field(PodRestart(), alias="podRestart")
    on_blocked_timeout: OnBlockedTimeout = Field(OnBlockedTimeout.HALT, alias="onBlockedTimeout")
    on_node_failure: OnNodeFailure = Field(OnNodeFailure.HALT, alias="onNodeFailure")
    # Ours: a person promotes the rollout past the canary, or past every domain. core/stages.py
    promotion_gate: PromotionGate = Field(PromotionGate.NONE, alias="promotionGate")
    # Ours: webhooks told when the rollout halts, its canary is done, it awaits promotion, a node
    # fails, it is done. core/notices.py
    notifications: Notifications = Notifications()
    # Ours: a start behind a PodDisruptionBudget the nodes in progress use up waits. core/pdb_choice.py
    pdb_aware_starts: bool = Field(False, alias="pdbAwareStarts", strict=True)
    # Ours: nodes still to be upgraded carry a PreferNoSchedule taint. core/pending_taint.py
    taint_pending_nodes: TaintPendingNodes = Field(TaintPendingNodes(), alias="taintPendingNodes")
    # Ours: drain every node after its GPU pods are deleted. The GPU Operator drains only when GPU pod
    # deletion cannot finish (and drain.enable is set), which is what upgrader does without this.
    drain_every_node: bool = Field(False, alias="drainEveryNode", strict=True)
    # Ours: no node starts outside these (none: always open); nodes in progress finish. docs/policy.md
    maintenance_windows: tuple[MaintenanceWindow, ...] = Field((), alias="maintenanceWindows")
    # Ours: no node starts while a matching Prometheus alert fires or Prometheus cannot say (None: no
    # gate); nodes in progress finish. core/alert_gate.py, docs/policy.md
    alert_gate: AlertGate | None = Field(None, alias="alertGate")
    # Ours: what a start does when its evicted GPU pods would find no room. core/capacity.py
    gpu_capacity: GpuCapacity = Field(GpuCapacity(), alias="gpuCapacity")
    # Ours: what run judges a start by (the image ledger, profiles, CUDA floors, the registry), as plan
    # does: a node with a blocking finding is held at upgrade-required. core/preflight.py
    preflight: PreflightPolicy = PreflightPolicy()

    @field_validator("maintenance_windows", mode="before")
    @classmethod
    def _no_windows(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, list | tuple):
            raise ValueError(f"must be a list of windows, got {type(value).__name__}")
        return () if value is None else value

    @field_validator("maintenance_windows")
    @classmethod
    def _distinct_names(cls, value: tuple[MaintenanceWindow, ...]) -> tuple[MaintenanceWindow, ...]:
        twice = sorted(name for name, n in Counter(w.name for w in value if w.name).items() if n > 1)
        if twice:
            raise ValueError(f"names a window twice: {', '.join(twice)}")
        return value

    def windows(self) -> list[Window]:
        return [w.window(i) for i, w in enumerate(self.maintenance_windows, start=1)]

    @field_validator(*_SECTIONS, mode="before")
    @classmethod
    def _null_is_default(cls, value: Any) -> Any:
        """`drain:` with nothing under it is the Operator's nil spec: every default."""
        return {} if value is None else value

    @field_validator("drain_every_node")
    @classmethod
    def _drain_every_node_needs_drain(cls, value: bool, info: ValidationInfo) -> bool:
        drain = info.data.get("drain")
        if value and drain is not None and not drain.enable:
            raise ValueError(
                "needs drain.enable: true (the drain's podSelector, force, deleteEmptyDir and timeoutSeconds "
                "come from drain)"
            )
        return value

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _max_unavailable(cls, value: Any) -> int | str:
        if isinstance(value, bool):
            raise ValueError('must be a number of nodes or a percentage like "25%"')
        if isinstance(value, int):
            if value < 0:
                raise ValueError(f"must not be negative, got {value}")
            return value
        text = str(value).strip()
        if text.isdigit():
            return cls._max_unavailable(int(text))
        match = _PERCENT.match(text)
        if not match:
            raise ValueError(f'must be a number of nodes or a percentage like "25%", got {value!r}')
        pct = int(match.group(1))
        if not 0 <= pct <= 100:
            raise ValueError(f"percentage must be between 0% and 100%, got {text}")
        return text

    def max_unavailable_nodes(self, total: int) -> int:
        """Scaled like the Operator: percentages of the managed nodes, rounded up. 0 (or 0%) is the
        Operator's "only nodes already unavailable progress"."""
        if isinstance(self.max_unavailable, int):
            return self.max_unavailable
        pct = int(self.max_unavailable[:-1])
        return math.ceil(pct * total / 100)

    def selector(self, text: str) -> LabelSelector:
        return parse_label_selector(text)


def policy_from_mapping(data: Any) -> Policy:
    """Build a policy from parsed YAML; a pasted `upgradePolicy:` (or `driver.upgradePolicy`) unwraps."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"policy must be a mapping of upgradePolicy keys, got {type(data).__name__}")
    where = ""
    if set(data) == {"driver"} and isinstance(data["driver"], dict):
        data, where = data["driver"], "driver."
    if "upgradePolicy" in data:
        beside = sorted(str(key) for key in data if key != "upgradePolicy")
        if beside:
            key = beside[0] if beside[0].isprintable() else repr(beside[0])
            raise ValueError(f"{where}{key}: unknown key (only {where}upgradePolicy is read)")
        data = data["upgradePolicy"] or {}
        if not isinstance(data, dict):
            raise ValueError(f"{where}upgradePolicy: must be a mapping, got {type(data).__name__}")
    return Policy.model_validate(data)
