"""The policy's `pools`: the managed nodes split by a label selector, a driver DaemonSet or an
NVIDIADriver, each pool with budgets, failure domains, canary, windows and promotion gate of its own
(docs/policy.md#pools). A node belongs to the first pool that selects it; the nodes no pool selects
make the pool `default`, under the policy's own keys. core/fleet/pool_shares.py schedules them side by side."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from upgrader.core.model.labels import label_value_error
from upgrader.core.policy.parts import (
    FailureDomains,
    MaintenanceWindow,
    PromotionGate,
    _selector,
    _Strict,
    distinct_window_names,
    max_unavailable_value,
)

DEFAULT_POOL = "default"  # the nodes no pool selects
MATCHERS = ("nodeSelector", "driverDaemonSet", "nvidiaDriver")
OVERRIDES = ("max_parallel_upgrades", "max_unavailable", "failure_domains", "maintenance_windows", "promotion_gate")


class Pool(_Strict):
    name: str
    # Which nodes: exactly one of these.
    node_selector: str | None = Field(None, alias="nodeSelector")  # a label selector, as kubectl -l takes it
    driver_daemon_set: str | None = Field(None, alias="driverDaemonSet")  # "name" or "namespace/name"
    nvidia_driver: str | None = Field(None, alias="nvidiaDriver")  # the NVIDIADriver owning the DaemonSet
    # What the pool has of its own; a key left out is the policy's.
    max_parallel_upgrades: int | None = Field(None, alias="maxParallelUpgrades", ge=0, strict=True)
    max_unavailable: int | str | None = Field(None, alias="maxUnavailable")
    failure_domains: FailureDomains | None = Field(None, alias="failureDomains")
    maintenance_windows: tuple[MaintenanceWindow, ...] | None = Field(None, alias="maintenanceWindows")
    promotion_gate: PromotionGate | None = Field(None, alias="promotionGate")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = label_value_error(value) if value else "must not be empty"
        if problem is not None:
            raise ValueError(f"not a valid pool name {value!r}: {problem} (it is a metric label and a stage's prefix)")
        if value == DEFAULT_POOL:
            raise ValueError(f'"{DEFAULT_POOL}" names the pool of the nodes no other pool selects; name it otherwise')
        return value

    _check = field_validator("node_selector", mode="before")(lambda cls, v: None if v is None else _selector(v))

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _max_unavailable(cls, value: Any) -> int | str | None:
        return None if value is None else max_unavailable_value(value)

    @field_validator("maintenance_windows")
    @classmethod
    def _windows(cls, value: tuple[MaintenanceWindow, ...] | None) -> tuple[MaintenanceWindow, ...] | None:
        return None if value is None else distinct_window_names(value)

    @model_validator(mode="after")
    def _one_matcher(self) -> Pool:
        given = [key for key, value in zip(MATCHERS, self.matchers(), strict=True) if value is not None]
        if len(given) != 1:
            said = f"gives {', '.join(given)}" if given else "gives none"
            raise ValueError(f"pool {self.name}: needs exactly one of {', '.join(MATCHERS)} ({said})")
        return self

    def matchers(self) -> tuple[str | None, str | None, str | None]:
        return self.node_selector, self.driver_daemon_set, self.nvidia_driver

    def overrides(self) -> dict[str, Any]:
        """The Policy fields this pool sets, by field name (core/policy/policy.py `Policy.for_pool`)."""
        return {name: getattr(self, name) for name in OVERRIDES if getattr(self, name) is not None}
