"""The world's state and what the core reads of it: the pods it creates (drivers, replicas) and the
views and Snapshot that `upgrader.kube.snapshot.take` would list (`World` in world.py builds on it).
"""

from __future__ import annotations

from itertools import count
from typing import Any

from upgrader.core.model.actions import Event
from upgrader.core.model.selectors import parse_label_selector
from upgrader.core.model.states import IN_PROGRESS
from upgrader.core.model.views import HASH_LABEL, Control, DriverSet, NodeView, PdbView, PodView, Snapshot
from upgrader.core.node.steps import NEEDS_PODS
from upgrader.core.report.document import RolloutStatus

from .world_objects import (
    DRIVER,
    DRIVER_DS,
    GPU_PRESENT,
    GPUS,
    NS,
    OLD_HASH,
    OPERATOR_NS,
    WORKLOAD,
    Budget,
    BudgetStatus,
    WNode,
    Workload,
    WPod,
)


class WorldState:
    """The cluster's objects and bookkeeping, the pods it creates, and how the core sees them."""

    # Set by World.__init__ (world.py); declared here for the methods of the classes it is built from.
    now: int
    seq: int
    nodes: dict[str, WNode]
    pods: dict[str, WPod]
    workloads: dict[str, Workload]
    budgets: dict[str, Budget]
    paused: bool
    acknowledged: dict[str, str]
    previous_status: RolloutStatus | None
    events: list[Event]
    statuses: list[dict[str, Any]]
    revisions: list[str]
    versions: dict[str, str]
    digests: dict[str, str]
    kept_loaded: list[str]
    fleet_seq: int
    _uids: count[int]
    _names: count[int]

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
        return self.previous_status.message if self.previous_status is not None else "(no status written)"

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
            acknowledged=dict(self.acknowledged),
            previous=self.previous_status,
        )
        return Snapshot(nodes, driver_pods, node_pods, pdbs, [driver_set], control)
