"""A small pure-Python cluster for property tests of the decision core: no emulator, no `kubernetes`.

It holds what the core reads (nodes, driver pods, each node's other pods, PodDisruptionBudgets, one
driver DaemonSet, the operators' pause/resume) and answers the core's actions as the API server does:

- `Transition`: compare-and-swap on the state label (the label must still read `source`; a `None`
  source needs an unlabelled node), then the annotations (`None` removes one). Else CONFLICT.
- `Annotate`, `SetUnschedulable`: applied as they are (idempotent by construction).
- `Evict`: the Eviction subresource. The covering budget's status is recomputed from the pods at that
  instant, as the disruption controller would (healthy = Ready and not terminating), so the second of
  two evictions in one pass sees the disruption the first used up. Without a disruption to spare the
  eviction is refused (Result.BLOCKED, HTTP 429); terminal, terminating and Pending pods ignore
  budgets, and an unready pod may go while the budget is met (`IfHealthyBudget`, the default). A
  successful eviction starts a graceful deletion: the pod is `terminating` until it disappears.
- `DeletePod`: a uid-guarded graceful delete (GONE when that pod is already gone or replaced).
- `Event`, `WriteStatus`: recorded; the last status written is the next pass's `Control.previous`.

A cordoned node keeps its pods; nothing but an eviction or a delete makes a pod terminate. The world
also plays the cluster's other actors (kubelet, ReplicaSet and DaemonSet controllers, scheduler,
GFD, operators, jobs) through small methods the state machine's rules call.

It keeps bookkeeping Kubernetes has not (who cordoned a node and when, when upgrader last started it,
which pods a budget refused, when a node's label last changed) and hands every action, just before
it takes effect, to the `auditors`, so the invariants can judge each write against the world it
lands in. `controller_pass` runs exactly `upgrader.controller.loop.Controller._pass`'s sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from upgrader.core.actions import (
    Action,
    Annotate,
    DeletePod,
    Event,
    Evict,
    Outcome,
    Result,
    SetUnschedulable,
    Transition,
    WriteStatus,
)
from upgrader.core.policy import Policy
from upgrader.core.reconcile import reconcile
from upgrader.core.selectors import parse_label_selector
from upgrader.core.states import (
    IN_PROGRESS,
    REQUESTED_ANNOTATION,
    SKIP_LABEL,
    STATE_LABEL,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.steps import NEEDS_PODS
from upgrader.core.views import HASH_LABEL, Control, DriverSet, NodeView, PdbView, PodView, Snapshot

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


Auditor = Callable[["World", Action, Result], None]


# ----- the world ------------------------------------------------------------------------------------------


class World:
    def __init__(self, spec: FleetSpec, now: int = T0) -> None:
        self.now = now
        self.seq = 0  # bumps on every change: orders cordons and starts
        self.nodes: dict[str, WNode] = {}
        self.pods: dict[str, WPod] = {}  # uid -> pod, in creation order
        self.workloads: dict[str, Workload] = {}
        self.budgets: dict[str, Budget] = {}
        self.paused = False
        self.resumed_at: int | None = None
        self.previous_status: dict[str, Any] = {}
        self.events: list[Event] = []
        self.statuses: list[dict[str, Any]] = []
        self.revisions = [OLD_HASH, NEW_HASH]  # the driver DaemonSet's ControllerRevisions, newest last
        self.versions = dict(VERSIONS)  # revision -> driver version
        self.digests = dict(DIGESTS)  # revision -> DRIVER_CONFIG_DIGEST
        self.kept_loaded: list[str] = []  # driver pods restarted with the module left loaded
        self.refused: dict[str, str] = {}  # uid of a pod a budget refused -> budget name
        self.actions: list[tuple[int, Action, Result]] = []  # (time, action, result) as applied
        self.auditors: list[Auditor] = []
        self.fleet_seq = 0  # sequence number of the last change to which nodes are managed
        self.writes_left: int | None = None  # set: the API server takes that many more writes, then fails
        self._uids = count(1)
        self._names = count(1)
        self._build(spec)

    # ----- construction ----------------------------------------------------------------------------

    def _build(self, spec: FleetSpec) -> None:
        names = [f"node-{i}" for i in range(len(spec.nodes))]
        for name, ns in zip(names, spec.nodes, strict=True):
            labels: dict[str, str] = {"kubernetes.io/hostname": name}
            if ns.zone is not None:
                labels[ZONE_KEY] = ns.zone
            if ns.skip:
                labels[SKIP_LABEL] = "true"
            annotations: dict[str, str] = {}
            node = WNode(name, labels, annotations, image_broken=ns.image_broken)
            self.nodes[name] = node
            if ns.cordoned:
                self.cordon_by_other(name)
            if not ns.gpu:
                node.gpu_allocatable = None
                continue
            labels[GPU_PRESENT] = "true"
            if ns.requested:
                annotations[REQUESTED_ANNOTATION] = "true"
            revision = NEW_HASH if ns.current else OLD_HASH
            driver = self._driver_pod(name, revision)
            driver.ready, driver.waiting_reason = True, None
            self._reload(node, revision)
            self._add(
                WPod(
                    OPERATOR_NS,
                    f"{VALIDATOR_DS}-{name}",
                    self._uid(),
                    name,
                    VALIDATOR,
                    {"app": VALIDATOR_APP},
                    owner_kind="DaemonSet",
                    owner_name=VALIDATOR_DS,
                )
            )
        for i, ws in enumerate(spec.workloads):
            name = f"web-{i}"
            self.workloads[name] = Workload(name, len(ws.placements), ws.gpus, ws.anti_affinity, ws.empty_dir)
            if ws.min_available is not None:
                self.budgets[name] = Budget(name, name, ws.min_available)
            for r, index in enumerate(ws.placements):
                self._workload_pod(self.workloads[name], names[index % len(names)], r not in ws.unready)
        for index, gpus in spec.jobs:
            self.start_job(names[index % len(names)], gpus)
        for index in spec.bare:
            host = names[index % len(names)]
            name = f"scratch-{next(self._names)}"
            self._add(WPod(NS, name, self._uid(), host, BARE, {"app": "scratch"}, gpus=1))
        for index in spec.gpu_daemons:
            host = names[index % len(names)]
            name = f"gpu-monitor-{next(self._names)}"
            self._add(
                WPod(
                    NS,
                    name,
                    self._uid(),
                    host,
                    GPU_DAEMON,
                    {"app": "gpu-monitor"},
                    gpus=1,
                    owner_kind="DaemonSet",
                    owner_name="gpu-monitor",
                )
            )

    def _uid(self) -> str:
        return f"uid-{next(self._uids)}"

    def _add(self, pod: WPod) -> WPod:
        self.pods[pod.uid] = pod
        self.seq += 1
        return pod

    @property
    def newest(self) -> str:
        return self.revisions[-1]

    def _driver_pod(self, node: str, revision: str) -> WPod:
        broken = revision != OLD_HASH and self.nodes[node].image_broken
        return self._add(
            WPod(
                OPERATOR_NS,
                f"nvidia-driver-{node}-{next(self._names)}",
                self._uid(),
                node,
                DRIVER,
                {"app": DRIVER_DS, HASH_LABEL: revision},
                owner_kind="DaemonSet",
                owner_name=DRIVER_DS,
                ready=False,
                waiting_reason="ImagePullBackOff" if broken else "ContainerCreating",
                digest=self.digests[revision],
            )
        )

    def _workload_pod(self, workload: Workload, node: str, ready: bool) -> WPod:
        return self._add(
            WPod(
                NS,
                f"{workload.name}-{next(self._names)}",
                self._uid(),
                node,
                WORKLOAD,
                {"app": workload.name},
                gpus=workload.gpus,
                owner_kind="ReplicaSet",
                owner_name=workload.name,
                ready=ready,
                empty_dir=workload.empty_dir,
            )
        )

    # ----- reading ----------------------------------------------------------------------------------

    def last_status_message(self) -> str:
        return str(self.previous_status.get("message", "(no status written)"))

    def pods_on(self, node: str) -> list[WPod]:
        return [p for p in self.pods.values() if p.node == node]

    def driver_pods_on(self, node: str) -> list[WPod]:
        return [p for p in self.pods_on(node) if p.kind == DRIVER]

    def managed(self) -> list[WNode]:
        """The nodes upgrader manages here: GPU nodes (the DaemonSet selects them) not skipped."""
        return [
            n
            for n in self.nodes.values()
            if n.gpu and not n.invalid and not (n.skipped and n.state not in IN_PROGRESS)
        ]

    def budget_status(self, budget: Budget) -> BudgetStatus:
        """As the disruption controller computes it for an integer minAvailable."""
        selected = [p for p in self.pods.values() if p.namespace == NS and p.labels.get("app") == budget.app]
        healthy = sum(1 for p in selected if p.healthy)
        expected = len(selected)
        allowed = max(0, healthy - budget.min_available) if expected > 0 else 0
        return BudgetStatus(allowed, healthy, budget.min_available, expected)

    def budget_of(self, pod: WPod) -> Budget | None:
        if pod.namespace != NS:
            return None
        return next((b for b in self.budgets.values() if pod.labels.get("app") == b.app), None)

    def node_view(self, node: WNode) -> NodeView:
        return NodeView(
            name=node.name,
            resource_version=str(node.resource_version),
            labels=dict(node.labels),
            annotations=dict(node.annotations),
            unschedulable=node.unschedulable,
            ready=node.ready,
            gpu_allocatable=node.gpu_allocatable,
            gpu_capacity=GPUS if node.gpu else None,
            kernel="5.15.0-69-generic",
            os_image="Ubuntu 22.04.2 LTS",
            state=node.state,
            invalid=node.invalid,
        )

    @staticmethod
    def pod_view(pod: WPod) -> PodView:
        return PodView(
            namespace=pod.namespace,
            name=pod.name,
            uid=pod.uid,
            node=pod.node,
            labels=dict(pod.labels),
            annotations={},
            phase=pod.phase,
            ready=pod.ready,
            terminating=pod.terminating,
            gpus=pod.gpus,
            owner_kind=pod.owner_kind,
            owner_name=pod.owner_name,
            empty_dir=pod.empty_dir,
            mirror=False,
            waiting_reason=pod.waiting_reason,
            config_digest=pod.digest,
        )

    def snapshot(self) -> Snapshot:
        """What `upgrader.kube.snapshot.take` lists: every node, the driver pods, every PDB, the
        driver DaemonSet; each node's pods only for nodes whose state needs them."""
        nodes = {n.name: self.node_view(n) for n in self.nodes.values()}
        driver_pods: dict[str, list[PodView]] = {}
        for pod in self.pods.values():
            if pod.kind == DRIVER:
                driver_pods.setdefault(pod.node, []).append(self.pod_view(pod))
        node_pods = {
            name: [self.pod_view(p) for p in self.pods_on(name)]
            for name, view in nodes.items()
            if view.state in NEEDS_PODS
        }
        pdbs = []
        for budget in self.budgets.values():
            status = self.budget_status(budget)
            pdbs.append(
                PdbView(
                    namespace=NS,
                    name=budget.name,
                    selector=parse_label_selector(f"app={budget.app}"),
                    disruptions_allowed=status.disruptions_allowed,
                    current_healthy=status.current_healthy,
                    desired_healthy=status.desired_healthy,
                    expected_pods=status.expected_pods,
                )
            )
        driver_set = DriverSet(
            namespace=OPERATOR_NS,
            name=DRIVER_DS,
            node_selector={GPU_PRESENT: "true"},
            newest_hash=self.newest,
            newest_revision=len(self.revisions),
            driver_version=self.versions[self.newest],
            image=f"nvcr.io/nvidia/driver:{self.versions[self.newest]}",
            config_digest=self.digests[self.newest],
        )
        control = Control(
            paused=self.paused,
            resumed_at=None if self.resumed_at is None else float(self.resumed_at),
            previous=dict(self.previous_status),
        )
        return Snapshot(nodes, driver_pods, node_pods, pdbs, [driver_set], control)

    # ----- the API server: upgrader's writes --------------------------------------------------------

    def apply(self, action: Action) -> Outcome:
        if self.writes_left is not None:
            if self.writes_left <= 0:
                self.actions.append((self.now, action, Result.ERROR))
                return Outcome(action, Result.ERROR, "connection refused")  # the API went away
            self.writes_left -= 1
        result, message = self._judge(action)
        for auditor in self.auditors:
            auditor(self, action, result)
        if isinstance(action, Evict) and result is Result.BLOCKED:
            budget = self.budget_of(self.pods[action.uid])
            self.refused[action.uid] = budget.name if budget else "?"
        if result is Result.OK:
            self._perform(action)
        self.actions.append((self.now, action, result))
        return Outcome(action, result, message)

    def _judge(self, action: Action) -> tuple[Result, str]:
        """What the API server answers, before anything changes."""
        if isinstance(action, Transition):
            node = self.nodes.get(action.node)
            if node is None:
                return Result.GONE, "node not found"
            current = node.labels.get(STATE_LABEL)
            expected = None if action.source is None else action.source.value
            if current != expected:
                return Result.CONFLICT, f"state label is {current!r}, not {expected!r}"
            return Result.OK, ""
        if isinstance(action, Annotate | SetUnschedulable):
            return (Result.OK, "") if action.node in self.nodes else (Result.ERROR, "node not found")
        if isinstance(action, Evict | DeletePod):
            pod = next(
                (p for p in self.pods.values() if p.namespace == action.namespace and p.name == action.name), None
            )
            if pod is None or pod.uid != action.uid:
                return Result.GONE, "pod not found or replaced"
            if isinstance(action, Evict):
                return self._eviction_verdict(pod)
            return Result.OK, ""
        return Result.OK, ""  # Event, WriteStatus

    def _eviction_verdict(self, pod: WPod) -> tuple[Result, str]:
        if pod.terminal or pod.terminating or pod.phase == "Pending":
            return Result.OK, ""
        budget = self.budget_of(pod)
        if budget is None:
            return Result.OK, ""
        status = self.budget_status(budget)
        unhealthy_ok = not pod.ready and 0 < status.desired_healthy <= status.current_healthy
        if not unhealthy_ok and status.disruptions_allowed <= 0:
            return (
                Result.BLOCKED,
                "Cannot evict pod as it would violate the pod's disruption budget. "
                f"The disruption budget {budget.name} needs {status.desired_healthy} healthy pods "
                f"and has {status.current_healthy} currently",
            )
        return Result.OK, ""

    def _perform(self, action: Action) -> None:
        self.seq += 1
        if isinstance(action, Transition):
            node = self.nodes[action.node]
            if action.target in IN_PROGRESS and action.source not in IN_PROGRESS:
                node.progress_seq = self.seq
            node.hand_edited = False
            node.adopted = node.adopted and action.target is not State.DONE
            node.labels[STATE_LABEL] = action.target.value
            _merge(node.annotations, action.annotations)
            node.resource_version += 1
            node.label_since = self.now
            if action.source is State.UPGRADE_REQUIRED and action.target is State.CORDON_REQUIRED:
                # A cordon already there when the record was gone is nobody's anyone can tell.
                node.record_lost = node.record_lost and node.unschedulable
                if not node.in_cycle:
                    node.started_seq, node.foreign_at_start, node.in_cycle = self.seq, node.foreign_cordon, True
            elif action.target is State.DONE:
                node.in_cycle = False
        elif isinstance(action, Annotate):
            node = self.nodes[action.node]
            _merge(node.annotations, action.annotations)
            node.resource_version += 1
        elif isinstance(action, SetUnschedulable):
            node = self.nodes[action.node]
            node.unschedulable = action.unschedulable
            node.uncordoned_by_other = False
            if not action.unschedulable:
                node.foreign_cordon = False  # one bit: whoever's cordon it was is gone
            node.resource_version += 1
        elif isinstance(action, Evict | DeletePod):
            pod = next(p for p in self.pods.values() if p.uid == action.uid)
            self._terminate(pod)
        elif isinstance(action, Event):
            self.events.append(action)
        elif isinstance(action, WriteStatus):
            self.previous_status = dict(action.status)
            self.statuses.append(dict(action.status))

    def _terminate(self, pod: WPod) -> None:
        if pod.terminal:
            self.pods.pop(pod.uid)  # a finished pod's deletion is immediate
            return
        pod.terminating = True
        if pod.kind == DRIVER and pod.digest == self.digests[self.newest]:
            # Nothing that installs the driver changed: the module stays loaded (restart-only).
            self.kept_loaded.append(pod.key)
        elif pod.kind == DRIVER:
            self._driver_down(pod.node)

    # ----- the driver on a node (what the GPU Operator, device plugin and GFD show) -------------------

    def _driver_down(self, node_name: str) -> None:
        node = self.nodes[node_name]
        if not any(p.ready and p.active for p in self.driver_pods_on(node_name)):
            node.gpu_allocatable = "0"
            for pod in self.pods_on(node_name):
                if pod.kind == VALIDATOR:
                    pod.ready = False

    def _reload(self, node: WNode, revision: str) -> None:
        """A driver became Ready: GPUs come back, GFD relabels the running version, validators pass."""
        node.gpu_allocatable = GPUS
        node.labels.update(dict(zip(CUDA_LABELS, self.versions[revision].split("."), strict=True)))
        for pod in self.pods_on(node.name):
            if pod.kind == VALIDATOR:
                pod.ready = True

    # ----- the cluster's other actors (the state machine's rules) -----------------------------------

    def advance(self, seconds: int) -> None:
        self.now += seconds

    def terminating(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.terminating]

    def disappear(self, uid: str) -> None:
        """The kubelet finished a graceful deletion: the pod is gone."""
        self.pods.pop(uid)
        self.seq += 1

    def nodes_missing_driver(self) -> list[str]:
        """GPU nodes where the OnDelete DaemonSet would create a driver pod (none live there)."""
        return [n.name for n in self.nodes.values() if n.gpu and not any(p.active for p in self.driver_pods_on(n.name))]

    def create_driver(self, node: str) -> WPod:
        """The DaemonSet controller creates the node's driver pod at the newest revision."""
        return self._driver_pod(node, self.newest)

    def starting_drivers(self) -> list[WPod]:
        """Driver pods not Ready that could turn Ready (their image pulls)."""
        return [
            p
            for p in self.pods.values()
            if p.kind == DRIVER
            and p.active
            and not p.ready
            and not (p.labels.get(HASH_LABEL) != OLD_HASH and self.nodes[p.node].image_broken)
        ]

    def driver_ready(self, uid: str) -> None:
        pod = self.pods[uid]
        pod.ready, pod.waiting_reason = True, None
        self._reload(self.nodes[pod.node], pod.labels[HASH_LABEL])
        self.seq += 1

    def running_or_failing_drivers(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == DRIVER and p.active]

    def running_drivers(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == DRIVER and p.active and p.ready]

    def driver_crash(self, uid: str) -> None:
        pod = self.pods[uid]
        pod.ready, pod.waiting_reason = False, "CrashLoopBackOff"
        self._driver_down(pod.node)
        self.seq += 1

    def running_jobs(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == JOB and p.active]

    def finish_job(self, uid: str) -> None:
        pod = self.pods[uid]
        pod.phase, pod.ready = "Succeeded", False
        self.seq += 1

    def schedulable(self, gpus: int) -> list[str]:
        """Nodes the scheduler may place a new pod on."""
        return [
            n.name
            for n in self.nodes.values()
            if not n.unschedulable and n.ready and (gpus == 0 or (n.gpu_allocatable or "0") != "0")
        ]

    def start_job(self, node: str, gpus: int) -> WPod:
        return self._add(
            WPod(
                NS,
                f"job-{next(self._names)}",
                self._uid(),
                node,
                JOB,
                {"app": JOB_APP},
                gpus=gpus,
                owner_kind="Job",
                owner_name="batch",
            )
        )

    def placements(self, workload: Workload) -> list[str]:
        """Where the ReplicaSet's next replica can go, when it is short of replicas."""
        mine = [p for p in self.pods.values() if p.kind == WORKLOAD and p.owner_name == workload.name]
        if sum(1 for p in mine if p.active) >= workload.replicas:
            return []
        taken = {p.node for p in mine if not p.terminal} if workload.anti_affinity else set()
        return [n for n in self.schedulable(workload.gpus) if n not in taken]

    def reschedule(self, workload: str, node: str, ready: bool) -> WPod:
        return self._workload_pod(self.workloads[workload], node, ready)

    def unready_pods(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == WORKLOAD and p.active and not p.ready]

    def pod_ready(self, uid: str) -> None:
        self.pods[uid].ready = True
        self.seq += 1

    def cordon_by_other(self, node: str) -> None:
        """`kubectl cordon` by someone else; on an unschedulable node it changes nothing."""
        n = self.nodes[node]
        if n.unschedulable:
            return
        self.seq += 1
        n.unschedulable, n.foreign_cordon, n.foreign_cordon_seq = True, True, self.seq
        n.resource_version += 1

    def uncordon_by_other(self, node: str) -> None:
        """`kubectl uncordon` by someone else, whoever's cordon it was."""
        n = self.nodes[node]
        if not n.unschedulable:
            return
        self.seq += 1
        n.unschedulable, n.foreign_cordon, n.uncordoned_by_other = False, False, True
        n.resource_version += 1

    def hand_set_label(self, node: str, value: str) -> None:
        """`kubectl label --overwrite` of the state label to any value, a bogus one included: the
        nodes in progress are no longer what upgrader made them."""
        n = self.nodes[node]
        if n.labels.get(STATE_LABEL) == value:
            return  # the value it already has: kubectl changes nothing, and the state's clock runs on
        n.labels[STATE_LABEL] = value
        n.label_since, n.hand_edited = self.now, True
        n.adopted = n.adopted or n.state in IN_PROGRESS or n.state is State.FAILED
        n.resource_version += 1
        self.seq += 1
        self.fleet_seq = self.seq

    def drop_annotation(self, node: str, key: str) -> None:
        """`kubectl annotate <node> <key>-`: one of upgrader's records is gone."""
        n = self.nodes[node]
        if n.annotations.pop(key, None) is not None:
            n.hand_edited = True
            n.record_lost = n.record_lost or key == WAS_UNSCHEDULABLE
            n.resource_version += 1
            self.seq += 1

    def relabel(self, node: str, state: State) -> None:
        """An operator's `kubectl label --overwrite` of the state label (annotations untouched)."""
        n = self.nodes[node]
        n.labels[STATE_LABEL] = state.value
        n.label_since = self.now
        n.resource_version += 1
        self.seq += 1

    def fix_image(self, node: str) -> None:
        self.nodes[node].image_broken = False
        for pod in self.driver_pods_on(node):
            if pod.waiting_reason == "ImagePullBackOff":
                pod.waiting_reason = "ContainerCreating"

    def gpu_daemon_pods(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == GPU_DAEMON and p.active]

    def remove_gpu_daemon(self, uid: str) -> None:
        """Someone takes the GPU-holding DaemonSet off the node (its pod is deleted, gracefully)."""
        self.pods[uid].terminating = True
        self.seq += 1

    def new_driver_revision(self) -> None:
        """`kubectl apply` of a newer driver: the DaemonSet's newest ControllerRevision changes (OnDelete:
        no pod changes by itself)."""
        if NEWER_HASH not in self.revisions:
            self.revisions.append(NEWER_HASH)
            self.seq += 1

    def tweak_driver_template(self) -> None:
        """A label or toleration of the driver template changes (at most once): a new revision with
        the same DRIVER_CONFIG_DIGEST, which the GPU Operator upgrades by restarting the driver only."""
        if TWEAK_HASH not in self.revisions:
            self.versions[TWEAK_HASH] = self.versions[self.newest]
            self.digests[TWEAK_HASH] = self.digests[self.newest]
            self.revisions.append(TWEAK_HASH)
            self.seq += 1

    def delete_driver_pod(self, uid: str) -> None:
        """`kubectl delete pod` of a driver pod (the runbook's fix for a failed node)."""
        pod = self.pods[uid]
        if pod.active:
            self._terminate(pod)
            self.seq += 1

    def set_skip(self, node: str, skip: bool) -> None:
        labels = self.nodes[node].labels
        if skip:
            labels[SKIP_LABEL] = "true"
        else:
            labels.pop(SKIP_LABEL, None)
        self.seq += 1
        self.fleet_seq = self.seq

    def request_upgrade(self, node: str) -> None:
        self.nodes[node].annotations[REQUESTED_ANNOTATION] = "true"
        self.seq += 1

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        """`upgrader resume`: unpause, and acknowledge every failure recorded so far."""
        self.paused = False
        self.resumed_at = self.now


def _merge(target: dict[str, str], changes: Mapping[str, str | None]) -> None:
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value


# ----- one controller pass --------------------------------------------------------------------------------


@dataclass
class PassResult:
    before: dict[str, Any]  # the status the pass judged halted/paused by, before starting nodes
    status: dict[str, Any]  # the status at the end of the pass
    starts: list[str]  # nodes whose start (upgrade-required -> cordon-required) was applied
    outcomes: list[Outcome] = field(default_factory=list)


def crashing_pass(world: World, policy: Policy, writes: int) -> PassResult:
    """A pass during which the API server stops answering after `writes` writes: every later write
    fails (Result.ERROR), as a crash of the controller or an outage would leave the cluster."""
    world.writes_left = writes
    try:
        return controller_pass(world, policy)
    finally:
        world.writes_left = None


def controller_pass(world: World, policy: Policy, now: int | None = None) -> PassResult:
    """The controller's pass (`core.reconcile`, as `Controller._pass` runs it) on the world: each
    batch of actions applied to the world in order, what landed folded into the next decisions."""
    when = float(world.now if now is None else now)
    result = reconcile(world.snapshot(), policy, when, lambda actions: [world.apply(a) for a in actions])
    return PassResult(result.before, result.status, result.started, result.outcomes)
