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

`World` (here: construction and `apply`) is built in layers: world_objects.py (constants, specs,
objects) <- world_state.py (state, pod creation, the Snapshot) <- world_apiserver.py (verdicts and
effects of writes) <- world_actors.py (everyone else's moves).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from upgrader.core.model.actions import Action, Event, Evict, Outcome, Result
from upgrader.core.model.states import REQUESTED_ANNOTATION, SKIP_LABEL
from upgrader.core.policy.policy import Policy
from upgrader.core.report.document import RolloutStatus
from upgrader.core.rollout.reconcile import reconcile

from .world_actors import WorldActors
from .world_carry import Carried, check_same_decisions
from .world_objects import (
    BARE,
    DIGESTS,
    GPU_DAEMON,
    GPU_PRESENT,
    NEW_HASH,
    NS,
    OLD_HASH,
    OPERATOR_NS,
    T0,
    VALIDATOR,
    VALIDATOR_APP,
    VALIDATOR_DS,
    VERSIONS,
    ZONE_KEY,
    Budget,
    FleetSpec,
    WNode,
    Workload,
    WPod,
)

Auditor = Callable[["World", Action, Result], None]


# ----- the world ------------------------------------------------------------------------------------------


class World(WorldActors):
    def __init__(self, spec: FleetSpec, now: int = T0) -> None:
        self.now = now
        self.seq = 0  # bumps on every change: orders cordons and starts
        self.nodes: dict[str, WNode] = {}
        self.pods: dict[str, WPod] = {}  # uid -> pod, in creation order
        self.workloads: dict[str, Workload] = {}
        self.budgets: dict[str, Budget] = {}
        self.paused = False
        self.acknowledged: dict[str, str] = {}  # node -> its failed-at, as `upgrader acknowledge` names it
        self.previous_status: RolloutStatus | None = None
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
        self.carried = Carried()  # the controller's views and FactsCarry between passes (world_carry.py)
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
    fresh = world.snapshot()
    snapshot = world.carried.snapshot(fresh)
    check_same_decisions(snapshot, fresh, policy, when)
    result = reconcile(snapshot, policy, when, lambda actions: [world.apply(a) for a in actions])
    return PassResult(result.before, result.status, result.started, result.outcomes)
