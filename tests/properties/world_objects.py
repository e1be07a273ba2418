"""The modelled world's vocabulary: its constants (clock, namespaces, driver revisions, pod kinds), the
specs hypothesis draws a fleet from, and the cluster's objects (nodes, pods, workloads, budgets).
"""

from __future__ import annotations

from dataclasses import dataclass

from upgrader.core.model.states import SKIP_LABEL, STATE_LABEL, State

T0 = 1_700_000_000  # every clock in the world is whole seconds from here (annotations are seconds)
NS = "default"
OPERATOR_NS = "gpu-operator"
DRIVER_DS = "nvidia-driver-daemonset"
VALIDATOR_DS = "nvidia-operator-validator"
VALIDATOR_APP = "nvidia-operator-validator"
ZONE_KEY = "topology.kubernetes.io/zone"
GPU_PRESENT = "nvidia.com/gpu.present"
OLD_HASH, NEW_HASH, NEWER_HASH, TWEAK_HASH = "rev-old", "rev-new", "rev-newer", "rev-tweak"
VERSIONS = {OLD_HASH: "535.104.05", NEW_HASH: "550.54.15", NEWER_HASH: "550.90.07"}
# DRIVER_CONFIG_DIGEST per revision: what installs the driver. A tweak (a label or toleration of the
# template changed) is a new revision with the digest and version of the one before it.
DIGESTS = {OLD_HASH: "digest-535", NEW_HASH: "digest-550", NEWER_HASH: "digest-550-90"}
CUDA_LABELS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
JOB_APP = "batch-job"
JOB_SELECTOR = f"app={JOB_APP}"
GPUS = "8"
NO_DOMAIN = "<none>"  # what the core calls the domain of a node without the zone label

# Pod kinds (bookkeeping; the core sees owners and labels only).
DRIVER, VALIDATOR, WORKLOAD, JOB, BARE, GPU_DAEMON = "driver", "validator", "workload", "job", "bare", "gpu-daemon"


# ----- what a world is built from (hypothesis draws these) ---------------------------------------------


@dataclass(frozen=True)
class NodeSpec:
    zone: str | None = None
    gpu: bool = True  # False: a CPU node no driver DaemonSet selects (never managed)
    current: bool = False  # its driver pod already runs the newest revision
    requested: bool = False  # carries nvidia.com/gpu-driver-upgrade-requested=true
    cordoned: bool = False  # someone else cordoned it before the rollout
    image_broken: bool = False  # the new driver image cannot be pulled here
    skip: bool = False  # nvidia.com/gpu-driver-upgrade.skip=true


@dataclass(frozen=True)
class WorkloadSpec:
    """A ReplicaSet: one pod per entry of `placements` (node indexes), optionally under a PDB."""

    placements: tuple[int, ...]
    gpus: int = 1
    min_available: int | None = None  # None: no PodDisruptionBudget
    anti_affinity: bool = True  # at most one replica per node
    empty_dir: bool = False
    unready: tuple[int, ...] = ()  # replica indexes that start not Ready


@dataclass(frozen=True)
class FleetSpec:
    nodes: tuple[NodeSpec, ...]
    workloads: tuple[WorkloadSpec, ...] = ()
    jobs: tuple[tuple[int, int], ...] = ()  # (node index, gpus) of running job pods
    bare: tuple[int, ...] = ()  # node indexes holding a GPU pod no controller owns
    gpu_daemons: tuple[int, ...] = ()  # node indexes running a DaemonSet pod that holds a GPU


# ----- the objects ----------------------------------------------------------------------------------------


@dataclass
class WNode:
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    unschedulable: bool = False
    ready: bool = True
    gpu_allocatable: str | None = GPUS
    image_broken: bool = False
    resource_version: int = 1
    # Bookkeeping Kubernetes has not: who cordoned the node, when upgrader last started it.
    foreign_cordon: bool = False  # someone else's cordon is in effect (set on a schedulable node)
    uncordoned_by_other: bool = False  # someone lifted the node's cordon since upgrader last set it
    hand_edited: bool = False  # someone edited its label or annotations since upgrader last moved it
    # Put in progress by a person (adopted): its cordon and budget are theirs until it is done.
    adopted: bool = False
    record_lost: bool = False  # someone removed upgrader's cordon record since it last started the node
    progress_seq: int = -1  # world sequence number of upgrader moving it into progress (start, recovery)
    foreign_cordon_seq: int = -1  # world sequence number of that cordon
    our_cordon_seq: int = -1  # world sequence number of upgrader's last cordon
    # Upgrader's start of the node's current upgrade cycle (a retried failure continues the cycle:
    # its cordon is upgrader's own, and upgrader cannot tell a cordon added in between from it).
    started_seq: int = -1  # world sequence number of that start
    foreign_at_start: bool = False  # someone else's cordon was in effect at that start
    in_cycle: bool = False  # started, and not upgrade-done since
    label_since: int = T0  # when the state label last changed (world clock)

    @property
    def state(self) -> State | None:
        """The state label; None when absent or not a state (`invalid` says so)."""
        try:
            return State.parse(self.labels.get(STATE_LABEL))
        except ValueError:
            return None

    @property
    def invalid(self) -> str | None:
        try:
            State.parse(self.labels.get(STATE_LABEL))
        except ValueError as exc:
            return f"label {STATE_LABEL}: {exc}"
        return None

    @property
    def gpu(self) -> bool:
        return self.labels.get(GPU_PRESENT) == "true"

    @property
    def skipped(self) -> bool:
        return self.labels.get(SKIP_LABEL) == "true"

    @property
    def zone(self) -> str:
        return self.labels.get(ZONE_KEY) or NO_DOMAIN


@dataclass
class WPod:
    namespace: str
    name: str
    uid: str
    node: str
    kind: str
    labels: dict[str, str]
    gpus: int = 0
    owner_kind: str | None = None
    owner_name: str | None = None
    ready: bool = True
    phase: str = "Running"
    terminating: bool = False
    empty_dir: bool = False
    waiting_reason: str | None = None
    digest: str | None = None  # a driver pod's DRIVER_CONFIG_DIGEST

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def active(self) -> bool:
        return not self.terminating and not self.terminal

    @property
    def healthy(self) -> bool:
        return self.ready and self.active


@dataclass
class Workload:
    name: str
    replicas: int
    gpus: int
    anti_affinity: bool
    empty_dir: bool


@dataclass
class Budget:
    """A policy/v1 PodDisruptionBudget with an integer minAvailable over `app=<app>` in NS."""

    name: str
    app: str
    min_available: int


@dataclass(frozen=True)
class BudgetStatus:
    disruptions_allowed: int
    current_healthy: int
    desired_healthy: int
    expected_pods: int
