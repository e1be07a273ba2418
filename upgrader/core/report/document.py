"""The rollout status as one typed document: `RolloutStatus`, and a pool's part of it, `PoolStatus`.

The core makes and reads these; only the edges see the dict the cluster stores (`to_dict`, written to
the status ConfigMap and the DriverRollout's `status.report`) and read it back (`read_status`, lenient:
an entry it cannot read is left out, a status it cannot read at all is None, so a status written by
another version never stops a pass)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, TypeVar

from pydantic import OnErrorOmit, TypeAdapter, ValidationError, ValidatorFunctionWrapHandler, WrapValidator

from upgrader.core.report.entries import (
    BackoffEntry,
    Budget,
    DomainCount,
    Eta,
    GateReport,
    InvalidNode,
    NodeBlocked,
    NodeFailed,
    NodeHeld,
    NodeInProgress,
    NodeWaiting,
    Target,
    WaitingOn,
    WindowReport,
)
from upgrader.core.report.kinds import Phase


def _or_none(value: object, handler: ValidatorFunctionWrapHandler) -> object:
    """A stored part this version cannot read is as if absent."""
    try:
        return handler(value)
    except ValidationError:
        return None


def _or_unjudged(value: object, handler: ValidatorFunctionWrapHandler) -> object:
    try:
        return handler(value)
    except ValidationError:
        return Budget()


# The parts a reader may find written in another shape (an older or newer controller), read or dropped.
T = TypeVar("T")
OrNone = Annotated[T | None, WrapValidator(_or_none)]
Entries = tuple[OnErrorOmit[T], ...]
Counts = dict[str, OnErrorOmit[int]]
KeptBudget = Annotated[Budget, WrapValidator(_or_unjudged)]


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """A pool's entry in the whole's status (core/fleet/pool_shares.py): its own figures; the lists of
    nodes are the whole's."""

    name: str
    selects: str  # how the pool picks its nodes, in the policy's words
    phase: Phase
    message: str
    halt_reason: str | None = None
    waiting_on: OrNone[WaitingOn] = None
    waiting_since: str | None = None
    nodes_total: int = 0
    nodes_by_state: Counts = field(default_factory=dict)
    current_domain: str | None = None
    next_domain: str | None = None
    domains: Entries[DomainCount] = ()
    eta: OrNone[Eta] = None
    budget: KeptBudget = field(default_factory=Budget)
    maintenance_window: OrNone[WindowReport] = None


@dataclass(frozen=True, slots=True)
class RolloutStatus:
    """The rollout at one pass (core/rollout/status.py makes it): its phase and message, why it halts,
    the pause, what no node starting waits on and since when, the window and the gate, nodes per state
    and per domain, the ETA, the targets, the nodes in progress, blocked, held, waiting, failed,
    skipped and invalid, the budget, when it was judged; with pools, each pool's; the eviction backoff."""

    phase: Phase
    message: str
    halt_reason: str | None = None
    paused: bool = False  # the intent it was judged under, as read (kept when its object is lost)
    paused_since: str | None = None
    waiting_on: OrNone[WaitingOn] = None
    waiting_since: str | None = None
    maintenance_window: OrNone[WindowReport] = None  # None: no maintenanceWindows (always open)
    alert_gate: OrNone[GateReport] = None  # None: no alertGate
    nodes_total: int = 0
    nodes_by_state: Counts = field(default_factory=dict)
    current_domain: str | None = None
    next_domain: str | None = None
    domains: Entries[DomainCount] = ()
    eta: OrNone[Eta] = None  # None: cannot say yet
    targets: Entries[Target] = ()
    in_progress: Entries[NodeInProgress] = ()
    interlocks: tuple[str, ...] = ()
    blocked: Entries[NodeBlocked] = ()
    held: Entries[NodeHeld] = ()
    waiting: Entries[NodeWaiting] = ()
    failed: Entries[NodeFailed] = ()
    skipped: tuple[str, ...] = ()
    invalid: Entries[InvalidNode] = ()
    budget: KeptBudget = field(default_factory=Budget)
    updated_at: str = ""
    pools: Entries[PoolStatus] | None = None  # None (not written): no pools in the policy
    eviction_backoff: dict[str, OnErrorOmit[BackoffEntry]] | None = None  # None (not written): no backoff

    def pool(self, name: str) -> PoolStatus | None:
        """The pool's entry (None for a pool it does not list)."""
        return next((p for p in self.pools or () if p.name == name), None)

    def settled(self) -> RolloutStatus:
        """Without its timestamp: what decides whether it is worth writing again."""
        return replace(self, updated_at="")


# What a status said last, the whole's or a pool's: both say what they waited on and since when.
LastStatus = RolloutStatus | PoolStatus

_STATUS = TypeAdapter(RolloutStatus)
_UNSET_IN_WAIT: tuple[tuple[str, object], ...] = (("alerts", []), ("stage", None), ("finished_at", None))


def to_dict(status: RolloutStatus) -> dict[str, Any]:
    """The status as the cluster stores it (JSON types; the parts not set left out, as they always were)."""
    out: dict[str, Any] = _STATUS.dump_python(status, mode="json")
    for key in ("pools", "eviction_backoff"):
        if out[key] is None:
            del out[key]
    for holder in (out, *(out.get("pools") or ())):
        wait = holder["waiting_on"]
        for key, unset in _UNSET_IN_WAIT if wait is not None else ():
            if wait[key] == unset:
                del wait[key]
    return out


def read_status(stored: object) -> RolloutStatus | None:
    """A stored status (`to_dict`'s, by this version or another); None when there is none to read."""
    if not isinstance(stored, Mapping) or not stored.get("phase"):
        return None
    try:
        return _STATUS.validate_python(stored)
    except ValidationError:
        return None
