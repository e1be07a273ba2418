"""The per-node upgrade states (GPU Operator convention) and the node keys upgrader owns."""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    """Values are exactly what the `nvidia.com/gpu-driver-upgrade-state` label holds."""

    UPGRADE_REQUIRED = "upgrade-required"
    CORDON_REQUIRED = "cordon-required"
    WAIT_FOR_JOBS_REQUIRED = "wait-for-jobs-required"
    POD_DELETION_REQUIRED = "pod-deletion-required"
    DRAIN_REQUIRED = "drain-required"
    POD_RESTART_REQUIRED = "pod-restart-required"
    VALIDATION_REQUIRED = "validation-required"
    UNCORDON_REQUIRED = "uncordon-required"
    DONE = "upgrade-done"
    FAILED = "upgrade-failed"

    @classmethod
    def parse(cls, value: str | None) -> State | None:
        """The state a label value names; None for a missing label, ValueError for garbage."""
        if value is None or value == "":
            return None
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown upgrade state {value!r}") from None


# States between "picked to start" and "finished": the node is being worked on.
IN_PROGRESS = frozenset(
    {
        State.CORDON_REQUIRED,
        State.WAIT_FOR_JOBS_REQUIRED,
        State.POD_DELETION_REQUIRED,
        State.DRAIN_REQUIRED,
        State.POD_RESTART_REQUIRED,
        State.VALIDATION_REQUIRED,
        State.UNCORDON_REQUIRED,
    }
)
ORDER = tuple(State)
# The status and metrics bucket of a managed node that carries no state label yet (autoUpgrade off,
# or not yet adopted), so the counts per state add up to the fleet.
UNLABELLED = "unlabelled"
STATE_COUNT_KEYS = (*(s.value for s in State), UNLABELLED)

# Node label and annotations. The state label and the request/skip keys are the GPU Operator's;
# the rest are upgrader's own bookkeeping, so a restarted controller resumes from the node.
STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
REQUESTED_ANNOTATION = "nvidia.com/gpu-driver-upgrade-requested"
# Set on a node by the driver pod's k8s-driver-manager when a driver pod that starts there (after a
# reboot, a crash, a hand deletion) waits before loading its module: the upgrade takes the node through
# cordon and pod deletion, and the restart step unblocks the load by removing it (k8s-operator-libs'
# safe driver loading).
SAFE_LOAD_ANNOTATION = "nvidia.com/gpu-driver-upgrade.driver-wait-for-safe-load"
# A pod label: "true" keeps the pod out of every drain (the GPU Operator's own pod carries it).
DRAIN_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade-drain.skip"
# The GPU Operator's bookkeeping on nodes, read so a rollout it started can be taken over: a node
# someone else had cordoned (present: leave it cordoned; we write it too), and the start times of
# its wait for jobs and of its validation (Unix seconds).
OPERATOR_INITIAL_UNSCHEDULABLE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
OPERATOR_WAIT_START = "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time"
OPERATOR_VALIDATION_START = "nvidia.com/gpu-driver-upgrade-validation-start-time"
OPERATOR_TIMERS = (OPERATOR_WAIT_START, OPERATOR_VALIDATION_START)

_A = "gpu-upgrader.io/"
STATE_SINCE = _A + "state-since"  # when the node entered its current state (RFC 3339)
SINCE_STATE = _A + "since-state"  # the state STATE_SINCE was stamped for: a label set by hand differs
STARTED_AT = _A + "started-at"  # when the node left upgrade-required
# The pool that started the node (policy `pools`): it counts against that pool's budgets until it leaves
# progress, whatever its labels or the spec's pools become (docs/policy.md#a-node-counts-where-it-started).
STARTED_POOL = _A + "started-pool"
WAS_UNSCHEDULABLE = _A + "was-unschedulable"  # "true": someone else had cordoned it before us
# "true": the cordon on the node is upgrader's. Written in the same guarded request as the cordon, so a
# cordon without it that appears after the start was someone else's (docs/policy.md#a-cordon-race).
OUR_CORDON = _A + "cordoned-by-upgrader"
GPU_BEFORE = _A + "gpu-allocatable-before"  # nvidia.com/gpu allocatable when we started
DRIVER_POD_UID = _A + "driver-pod-uid"  # the driver pod to restart (recorded on entering restart)
DRIVER_DELETED_AT = _A + "driver-deleted-at"  # when we deleted it: the restart timeout counts from here
TARGET_REVISION = _A + "target-revision"  # controller-revision-hash the node is moving to
BLOCKED_KIND = _A + "blocked-kind"  # pdb, wait-for-jobs, pod-deletion, drain, ...
BLOCKED_REASON = _A + "blocked-reason"
BLOCKED_SINCE = _A + "blocked-since"
FAILED_KIND = _A + "failed-kind"  # image, driver-restart, validation, pdb, ...
FAILED_STATE = _A + "failed-state"  # the state the node failed in
FAILED_REASON = _A + "failed-reason"
FAILED_AT = _A + "failed-at"
# The driver pod (uid) that was Ready at the newest revision when the node failed: the node recovers
# only once another one is (a failure with no such pod recovers once any is).
FAILED_DRIVER_POD = _A + "failed-driver-pod"
# Why the preflight keeps a node at upgrade-required (a blocking `plan` finding's kind and words), and
# since when: run never starts it meanwhile (core/fleet/preflight.py). Cleared when it starts or passes.
HELD_KIND = _A + "held-kind"
HELD_REASON = _A + "held-reason"
HELD_SINCE = _A + "held-since"
HELD = (HELD_KIND, HELD_REASON, HELD_SINCE)
# The DRIVER_CONFIG_DIGEST a restart-only upgrade started for: its driver restarts under its GPU pods.
RESTART_ONLY = _A + "restart-only"

# Annotations cleared when a node finishes (done) so the next upgrade starts clean.
PER_UPGRADE = (
    STARTED_AT,
    STARTED_POOL,
    WAS_UNSCHEDULABLE,
    OUR_CORDON,
    GPU_BEFORE,
    DRIVER_POD_UID,
    DRIVER_DELETED_AT,
    TARGET_REVISION,
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    FAILED_KIND,
    FAILED_STATE,
    FAILED_REASON,
    FAILED_AT,
    FAILED_DRIVER_POD,
    RESTART_ONLY,
)
# Cleared as well when a node finishes: the Operator's marks, once they have been honoured.
FINISHED_OPERATOR_KEYS = (OPERATOR_INITIAL_UNSCHEDULABLE, *OPERATOR_TIMERS)
