"""The entries of the rollout status (document.py), one type each: the nodes blocked, held, failed,
waiting and in progress, the domains and their counts, the budget, what the rollout waits on, the
maintenance window and the alert gate as the status reports them, the ETA and the eviction backoff.

Plain frozen data; the keys the cluster stores are the field names (document.py's `to_dict`)."""

from __future__ import annotations

from dataclasses import dataclass

from upgrader.core.report.kinds import WaitReason


@dataclass(frozen=True, slots=True)
class NodeBlocked:
    """A node in progress that cannot go on without a person (gpu-upgrader.io/blocked-*)."""

    node: str
    state: str
    kind: str
    reason: str
    since: str
    runbook: str


@dataclass(frozen=True, slots=True)
class NodeHeld:
    """A node the preflight keeps at upgrade-required (core/fleet/preflight.py), as recorded on it."""

    node: str
    kind: str
    reason: str
    since: str
    runbook: str


@dataclass(frozen=True, slots=True)
class NodeFailed:
    """A node at upgrade-failed: `state`, the state it failed in; `during_pause`, failed while paused."""

    node: str
    kind: str
    reason: str
    since: str
    acknowledged: bool
    state: str
    runbook: str
    during_pause: bool = False


@dataclass(frozen=True, slots=True)
class NodeWaiting:
    """A node in progress that waits normally this pass (its GPU pods, its driver pod, a budget)."""

    node: str
    state: str
    reason: str
    since: str


@dataclass(frozen=True, slots=True)
class NodeInProgress:
    node: str
    state: str
    since: str


@dataclass(frozen=True, slots=True)
class InvalidNode:
    """A driver node that cannot be managed (two driver DaemonSets, a bogus state label), and why."""

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Target:
    """What the nodes are upgraded to: a driver DaemonSet's newest revision and its driver."""

    daemonset: str  # namespace/name
    driver_version: str
    revision: str


@dataclass(frozen=True, slots=True)
class DomainCount:
    """One failure domain's nodes, in the rollout's order; `by_state` holds every state and unlabelled."""

    name: str
    canary: bool
    nodes: int
    done: int
    in_progress: int
    failed: int
    by_state: dict[str, int]


@dataclass(frozen=True, slots=True)
class Budget:
    """Nodes in progress and unavailable against the limits (None: not judged, or each pool's)."""

    in_progress: int = 0
    max_parallel_upgrades: int | None = None
    unavailable: int | None = None
    max_unavailable: int | None = None


@dataclass(frozen=True, slots=True)
class WaitNode:
    node: str
    why: str


@dataclass(frozen=True, slots=True)
class WaitingOn:
    """What no node starting waits on (core/rollout/waits.py's `Wait`, as the status keeps it: the same
    from pass to pass while the wait is). `alerts` only for alert-firing; `stage` and `finished_at`
    only for a soak or a promotion wait; `to_dict` leaves out the ones not set."""

    reason: WaitReason
    domain: str | None
    nodes: tuple[WaitNode, ...]
    count: int
    next: str | None = None
    until: str | None = None
    runbook: str | None = None
    alerts: tuple[str, ...] = ()
    stage: str | None = None
    finished_at: str | None = None


@dataclass(frozen=True, slots=True)
class WindowReport:
    """The maintenance window now (core/policy/windows.py): open or not, which, until when, next opening."""

    open: bool
    window: str | None = None
    about: str | None = None
    closes_at: str | None = None
    next_open: str | None = None


@dataclass(frozen=True, slots=True)
class GateReport:
    """The alert gate now (core/policy/alert_gate.py): open or not, the matching alerts firing, or why
    Prometheus could not say."""

    open: bool
    prometheus: str
    firing: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Eta:
    """When the rollout should be done (core/rollout/status.py `estimate`): the median node's time, from how many."""

    at: str
    node_seconds: int
    from_nodes: int
    nodes_left: int


@dataclass(frozen=True, slots=True)
class BackoffEntry:
    """One PodDisruptionBudget's eviction backoff (core/fleet/eviction_backoff.py), kept across passes."""

    refusals: int
    allowed: int
    retry_at: str
    healthy: int = -1  # `currentHealthy` unknown: written before it was kept
