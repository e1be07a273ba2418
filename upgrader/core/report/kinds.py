"""The kinds a person reads alike in the status, an Event, a log line and a metric, each written once
with its metric label and its runbook page (runbooks/<page>.md):

- `BlockKind`: what stops a node in progress until its cause is gone (a node annotation, the status's
  `blocked[].kind`, `upgrader_blocked_nodes{reason}`);
- `FailureKind`: why a node went to upgrade-failed (`failed[].kind`, `upgrader_failed_nodes{reason}`):
  a restart or validation that timed out, or a block past its timeout under onBlockedTimeout: fail;
- `HoldKind`: the blocking preflight finding that keeps a node at upgrade-required (`held[].kind`,
  `upgrader_held_nodes{reason}`);
- `WaitReason`: why no node starts now (`waiting_on.reason`, `upgrader_rollout_waiting{reason}`);
  its runbook is cited only where a person ends the wait;
- `Phase`: the rollout's phase (`phase`, `upgrader_rollout_phase{phase}`).

A kind read back from a node (an annotation someone may have edited) is looked up with `read`, which
answers None for a value that is none of ours; its runbook is then the generic page of its family.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

HALTED_PAGE = "runbooks/rollout-halted.md"
HOLD_PAGE = "runbooks/preflight-hold.md"


class Kind(StrEnum):
    """A kind's value is what the status and the node annotations say; `label` is its metric label
    (Prometheus label values read as identifiers: `wait_for_jobs`); `runbook` the page that explains it."""

    runbook: str | None

    def __new__(cls, value: str, runbook: str | None = None) -> Self:
        member = str.__new__(cls, value)
        member._value_ = value
        member.runbook = runbook
        return member

    @property
    def label(self) -> str:
        return self.value.replace("-", "_")

    @classmethod
    def read(cls, value: str | None) -> Self | None:
        """The member `value` names, or None when it names none (missing, or set by hand)."""
        return cls._value2member_map_.get(value or "")  # type: ignore[return-value]


class BlockKind(Kind):
    PDB = "pdb", "runbooks/pdb-blocked-eviction.md"
    WAIT_FOR_JOBS = "wait-for-jobs", "runbooks/wait-for-jobs-timeout.md"
    POD_DELETION = "pod-deletion", "runbooks/gpu-pod-deletion-blocked.md"
    DRAIN = "drain", "runbooks/drain-blocked.md"
    GPU_PODS = "gpu-pods", "runbooks/gpu-pods-still-running.md"
    CORDON_RECORD = "cordon-record", "runbooks/cordon-record-missing.md"
    DRIVER_DAEMONSET = "driver-daemonset", "runbooks/driver-daemonset-missing.md"
    STATE_LABEL = "state-label", "runbooks/state-label-moved.md"


class FailureKind(Kind):
    IMAGE = "image", "runbooks/missing-driver-image.md"
    DRIVER_RESTART = "driver-restart", "runbooks/driver-pod-not-ready.md"
    VALIDATION = "validation", "runbooks/validation-failure.md"
    # A block past its timeout under onBlockedTimeout: fail keeps the block's kind and its page.
    PDB = BlockKind.PDB.value, BlockKind.PDB.runbook
    WAIT_FOR_JOBS = BlockKind.WAIT_FOR_JOBS.value, BlockKind.WAIT_FOR_JOBS.runbook
    POD_DELETION = BlockKind.POD_DELETION.value, BlockKind.POD_DELETION.runbook
    DRAIN = BlockKind.DRAIN.value, BlockKind.DRAIN.runbook
    GPU_PODS = BlockKind.GPU_PODS.value, BlockKind.GPU_PODS.runbook
    FAILED = "failed", "runbooks/upgrade-failed-recovery.md"  # no kind recorded: recovery in general

    @classmethod
    def of_block(cls, kind: BlockKind) -> FailureKind:
        """The failure a block past its timeout becomes (a kind with no failure of its own: FAILED)."""
        return cls.read(kind.value) or cls.FAILED


class HoldKind(Kind):
    MISSING_DRIVER_IMAGE = "missing-driver-image", "runbooks/missing-driver-image.md"
    UNQUALIFIED_PROFILE = "unqualified-profile", HOLD_PAGE
    CUDA_INCOMPATIBLE = "cuda-incompatible", HOLD_PAGE
    INVALID_NODE_DATA = "invalid-node-data", HOLD_PAGE
    PREFLIGHT_INPUT = "preflight-input", HOLD_PAGE


class WaitReason(Kind):
    MAX_PARALLEL_UPGRADES = "max-parallel-upgrades"
    MAX_UNAVAILABLE = "max-unavailable", HALTED_PAGE  # cited when a person can free a node
    MAX_UNAVAILABLE_ZERO = "max-unavailable-zero", HALTED_PAGE
    SOAK = "soak"
    CANARY_NODES = "canary-nodes", "runbooks/canary-nodes.md"  # ends by itself: never cited
    AWAITING_PROMOTION = "awaiting-promotion", "runbooks/promotion.md"
    PREVIOUS_DOMAIN = "previous-domain"  # held nodes keep it: their hold's page is cited
    OTHER_DOMAIN = "other-domain"
    MAINTENANCE_WINDOW = "maintenance-window", "runbooks/maintenance-window-closed.md"  # cited when none opens
    ALERT_FIRING = "alert-firing", "runbooks/alert-gate.md"
    ALERT_GATE_UNAVAILABLE = "alert-gate-unavailable", "runbooks/alert-gate.md"
    INSUFFICIENT_GPU_CAPACITY = "insufficient-gpu-capacity", "runbooks/insufficient-gpu-capacity.md"
    PDB_CAPACITY = "pdb-capacity"
    PREFLIGHT_HOLD = "preflight-hold"  # the first held node's page is cited


class Phase(Kind):
    RUNNING = "Running"
    HALTED = "Halted", HALTED_PAGE
    PAUSED = "Paused", "runbooks/pause-resume.md"
    DONE = "Done"


def block_runbook(kind: str | None) -> str:
    """The page of the block or failure kind a node records; one that names no kind of ours: halted's."""
    found = BlockKind.read(kind) or FailureKind.read(kind)
    return found.runbook if found and found.runbook else HALTED_PAGE


def hold_runbook(kind: str | None) -> str:
    found = HoldKind.read(kind)
    return found.runbook if found and found.runbook else HOLD_PAGE


# kind -> its page, for the runbook index and its tests: every block and failure kind, and the phases
# that have a page of their own.
RUNBOOKS: dict[str, str] = {
    k.value.lower(): (k.runbook or HALTED_PAGE).removeprefix("runbooks/").removesuffix(".md")
    for k in (*BlockKind, *FailureKind, *(p for p in Phase if p.runbook))
}
