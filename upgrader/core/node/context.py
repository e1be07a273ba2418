"""What one node's step reads: the node, its pods, its driver pods and DaemonSet, the budgets and the
policy; and the facts about its driver that several steps ask for."""

from __future__ import annotations

from dataclasses import dataclass

from upgrader.core.model.gpupods import GpuClaims, gpu_pods, may_hold_gpu
from upgrader.core.model.states import FAILED_AT, REQUESTED_ANNOTATION, RESTART_ONLY
from upgrader.core.model.views import DriverSet, NodeView, PdbView, PodView, Snapshot
from upgrader.core.policy.policy import Policy


@dataclass(frozen=True)
class NodeContext:
    node: NodeView
    pods: list[PodView]  # everything on the node
    driver_pods: list[PodView]
    driver_set: DriverSet | None
    pdbs: list[PdbView]
    policy: Policy
    claims: GpuClaims = None

    def gpu_pods(self) -> list[PodView]:
        """The node's pods that hold a GPU, as the GPU Operator decides it (the ones it deletes)."""
        return gpu_pods(self.pods, self.claims)

    def gpu_holders(self) -> list[PodView]:
        """Pods that may still hold a GPU: any not finished, whatever their phase (Unknown included),
        for the one check that must not err: the driver never unloads under them."""
        return [p for p in self.pods if may_hold_gpu(p, self.claims)]

    @property
    def flags(self) -> frozenset[str]:
        """What the state machine's guards ask of this node and policy."""
        return frozenset(
            name
            for name, on in (
                ("restart_only", bool(self.node.annotations.get(RESTART_ONLY))),
                ("drain_enabled", self.policy.drain.enable),
                ("drain_every_node", self.policy.drain_every_node),
            )
            if on
        )

    @property
    def target_hash(self) -> str | None:
        """The driver DaemonSet's newest revision: the one this node is moving to (None: unknown)."""
        return self.driver_set.newest_hash if self.driver_set else None


def driver_set_for(snapshot: Snapshot, name: str) -> DriverSet | None:
    """The driver DaemonSet of the node's live driver pod, else the first one whose selector picks it."""
    driver_pods = snapshot.driver_pods.get(name, [])
    live = [p for p in driver_pods if not p.terminating] or driver_pods
    ds = snapshot.driver_set_of(live[0]) if live else None
    if ds is None:
        ds = next((d for d in snapshot.driver_sets if d.selects(snapshot.nodes[name])), None)
    return ds


def context(snapshot: Snapshot, name: str, policy: Policy) -> NodeContext:
    return NodeContext(
        snapshot.nodes[name],
        snapshot.node_pods.get(name, []),
        snapshot.driver_pods.get(name, []),
        driver_set_for(snapshot, name),
        snapshot.pdbs,
        policy,
        snapshot.gpu_claims,
    )


def superseded_driver_pods(ctx: NodeContext) -> list[PodView]:
    """Live driver pods at a revision older than the DaemonSet's newest: with OnDelete nothing
    replaces them until they are deleted."""
    target = ctx.target_hash
    if target is None:
        return []
    return [p for p in ctx.driver_pods if not p.terminating and p.revision_hash != target]


def same_install_config(pod: PodView, driver_set: DriverSet | None) -> bool:
    """The driver pod and its DaemonSet's template carry the same non-empty DRIVER_CONFIG_DIGEST (the
    GPU Operator's test) and, as a check of our own, the same images: nothing that installs the
    driver changed, so a restart keeps the loaded module and the GPU pods may stay."""
    return (
        driver_set is not None
        and pod.config_digest is not None
        and pod.config_digest == driver_set.config_digest
        and pod.images == driver_set.images
    )


def restart_only_digest(ctx: NodeContext) -> str | None:
    """The digest a node's upgrade may be a restart-only one for, or None for a full upgrade (a
    requested upgrade, a retry after a failure, or a change to how the driver installs)."""
    annotations = ctx.node.annotations
    if annotations.get(REQUESTED_ANNOTATION) == "true" or annotations.get(FAILED_AT):
        return None
    stale = superseded_driver_pods(ctx)
    if not stale or not all(same_install_config(p, ctx.driver_set) for p in stale):
        return None
    return stale[0].config_digest


