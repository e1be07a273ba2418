"""The upgrade policy: the GPU Operator's `driver.upgradePolicy` keys plus upgrader's additions.

Defaults follow the Operator where it has one (maxParallelUpgrades 1, maxUnavailable 25%,
pod deletion and drain timeouts 300 s, drain off, wait-for-completion without timeout); a key left
empty (`drain:` with nothing under it, YAML null) is the Operator's nil spec and takes them all.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import AliasChoices, Field, ValidationInfo, field_validator

from upgrader.core.model.selectors import LabelSelector, parse_label_selector
from upgrader.core.policy.alert_gate import AlertGate
from upgrader.core.policy.notices import Notifications
from upgrader.core.policy.parts import FailureDomains as FailureDomains  # re-exported: where callers look
from upgrader.core.policy.parts import (
    MaintenanceWindow,
    _selector,
    _Strict,
    distinct_window_names,
    list_or_none,
    max_unavailable_value,
    names_once,
    unavailable_nodes,
)
from upgrader.core.policy.parts import PromotionGate as PromotionGate
from upgrader.core.policy.parts import selector_problem as selector_problem
from upgrader.core.policy.pending_taint_policy import TaintPendingNodes
from upgrader.core.policy.pool_policy import Pool
from upgrader.core.policy.preflight_policy import PreflightPolicy
from upgrader.core.policy.windows import Window


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


class OnInsufficientCapacity(StrEnum):
    """The GPU pods a node's upgrade evicts would find no room: start it anyway (plan warns, run
    says so in an Event), or hold it at upgrade-required until room appears."""

    WARN = "warn"
    WAIT = "wait"


class GpuCapacity(_Strict):
    on_insufficient: OnInsufficientCapacity = Field(OnInsufficientCapacity.WARN, alias="onInsufficient")


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
    # Ours: a person promotes the rollout past the canary, or past every domain. core/rollout/stages.py
    promotion_gate: PromotionGate = Field(PromotionGate.NONE, alias="promotionGate")
    # Ours: webhooks told when the rollout halts, its canary is done, it awaits promotion, a node
    # fails, it is done. core/policy/notices.py
    notifications: Notifications = Notifications()
    # Ours: a start behind a PodDisruptionBudget the nodes in progress use up waits. core/fleet/pdb_choice.py
    pdb_aware_starts: bool = Field(False, alias="pdbAwareStarts", strict=True)
    # Ours: nodes still to be upgraded carry a PreferNoSchedule taint. core/rollout/pending_taint.py
    taint_pending_nodes: TaintPendingNodes = Field(TaintPendingNodes(), alias="taintPendingNodes")
    # Ours: the managed nodes split into pools that progress side by side, each with budgets, failure
    # domains, canary, windows and promotion gate of its own (core/policy/pool_policy.py); a halt in one
    # stops the others only under haltAcrossPools.
    pools: tuple[Pool, ...] = ()
    halt_across_pools: bool = Field(False, alias="haltAcrossPools", strict=True)
    # Ours: drain every node after its GPU pods are deleted. The GPU Operator drains only when GPU pod
    # deletion cannot finish (and drain.enable is set), which is what upgrader does without this.
    drain_every_node: bool = Field(False, alias="drainEveryNode", strict=True)
    # Ours: no node starts outside these (none: always open); nodes in progress finish. docs/policy.md
    maintenance_windows: tuple[MaintenanceWindow, ...] = Field((), alias="maintenanceWindows")
    # Ours: no node starts while a matching Prometheus alert fires or Prometheus cannot say (None: no
    # gate); nodes in progress finish. core/policy/alert_gate.py, docs/policy.md
    alert_gate: AlertGate | None = Field(None, alias="alertGate")
    # Ours: what a start does when its evicted GPU pods would find no room. core/node/capacity.py
    gpu_capacity: GpuCapacity = Field(GpuCapacity(), alias="gpuCapacity")
    # Ours: what run judges a start by (the image ledger, profiles, CUDA floors, the registry), as plan
    # does: a node with a blocking finding is held at upgrade-required. core/fleet/preflight.py
    preflight: PreflightPolicy = PreflightPolicy()

    @field_validator("maintenance_windows", mode="before")
    @classmethod
    def _no_windows(cls, value: Any) -> Any:
        return list_or_none(value, "window")

    @field_validator("maintenance_windows")
    @classmethod
    def _distinct_names(cls, value: tuple[MaintenanceWindow, ...]) -> tuple[MaintenanceWindow, ...]:
        return distinct_window_names(value)

    @field_validator("pools", mode="before")
    @classmethod
    def _no_pools(cls, value: Any) -> Any:
        return list_or_none(value, "pool")

    @field_validator("pools")
    @classmethod
    def _distinct_pools(cls, value: tuple[Pool, ...]) -> tuple[Pool, ...]:
        names_once([p.name for p in value], "pool")
        return value

    def for_pool(self, pool: Pool | None) -> Policy:
        """The policy a pool's nodes start under: the pool's own keys over this policy's (None: the
        pool `default`, this policy as it is)."""
        if pool is None:
            return self
        return self.model_copy(update={**pool.overrides(), "pools": ()})

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
        return max_unavailable_value(value)

    def max_unavailable_nodes(self, total: int) -> int:
        return unavailable_nodes(self.max_unavailable, total)

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
