"""What a pass asks the adapter to do, and what came of it. Plain data, no API client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from upgrader.core.model.placement import Taint
from upgrader.core.model.states import SINCE_STATE, STATE_SINCE, State
from upgrader.core.report.document import RolloutStatus


@dataclass(frozen=True)
class Transition:
    """Move a node's state label from `source` to `target` (compare-and-swap on the label)."""

    node: str
    source: State | None
    target: State
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    message: str = ""
    trigger: str = field(default="", compare=False)  # the machine's trigger that produced it

    def __post_init__(self) -> None:
        # A clock started by a transition names its state, so a state label set by hand later shows.
        if self.annotations.get(STATE_SINCE) and SINCE_STATE not in self.annotations:
            object.__setattr__(self, "annotations", {**self.annotations, SINCE_STATE: self.target.value})


@dataclass(frozen=True)
class Annotate:
    """Set (str) or remove (None) node annotations."""

    node: str
    annotations: Mapping[str, str | None]


@dataclass(frozen=True)
class SetUnschedulable:
    """Cordon or uncordon, with `record` (annotations) in the same request: a cordon and the record
    that says whose it is never land apart."""

    node: str
    unschedulable: bool
    record: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class SetLabels:
    """Set (str) or remove (None) node labels, with `record` (annotations) in the same request, guarded by
    each label's value it was decided on (`expected`; the restart's admission guard, core/node/fence.py):
    a label someone changed meanwhile is a conflict, and the next pass decides again."""

    node: str
    labels: Mapping[str, str | None]
    record: Mapping[str, str | None] = field(default_factory=dict)
    expected: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SetTaints:
    """The node's whole `spec.taints` as it should be (ours added or removed, the others kept),
    written guarded by the resourceVersion it was decided on (core/rollout/pending_taint.py)."""

    node: str
    taints: tuple[Taint, ...]


@dataclass(frozen=True)
class Evict:
    """Through the Eviction API, so PodDisruptionBudgets hold; never falls back to a delete."""

    node: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class DeletePod:
    """Delete one pod, guarded by its uid (used for the driver pod only)."""

    node: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the node, reason `GPUDriverUpgrade`."""

    node: str
    type: str  # Normal | Warning
    message: str


@dataclass(frozen=True)
class WriteStatus:
    status: RolloutStatus  # the adapter stores it as core/report/document.py's `to_dict` says


Action = Transition | Annotate | SetUnschedulable | SetLabels | SetTaints | Evict | DeletePod | Event | WriteStatus


class Result(StrEnum):
    OK = "ok"
    BLOCKED = "blocked"  # an eviction a PodDisruptionBudget refused (HTTP 429 from the subresource)
    GONE = "gone"  # the object was already gone: the goal is met
    CONFLICT = "conflict"  # someone changed it first: re-read on the next pass
    ERROR = "error"


@dataclass(frozen=True)
class Outcome:
    action: Action
    result: Result
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.result in (Result.OK, Result.GONE)
