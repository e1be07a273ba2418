"""The rollout's promises per write: `Audit` judges each of upgrader's writes just before the world
applies it (state machine edges, a node's turn to start, cordons, evictions, deletes; docs/policy.md).
"""

from __future__ import annotations

from upgrader.core.model.actions import (
    Action,
    Annotate,
    DeletePod,
    Event,
    Evict,
    Result,
    SetUnschedulable,
    Transition,
    WriteStatus,
)
from upgrader.core.model.states import (
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_REASON,
    FAILED_STATE,
    IN_PROGRESS,
    RESTART_ONLY,
    SINCE_STATE,
    STATE_SINCE,
)
from upgrader.core.model.timefmt import parse_or_none
from upgrader.core.model.views import HASH_LABEL
from upgrader.core.policy.policy import Policy

from .invariants import CORDONED, SKIPPED_EDGES, S, domain_sequence, edges, halt_causes, settled
from .world import World
from .world_objects import DRIVER, WNode


class Audit:
    """Judges each write just before the world applies it; keeps every broken promise as a line."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.violations: list[str] = []

    def __call__(self, world: World, action: Action, result: Result) -> None:
        if isinstance(action, WriteStatus):
            return
        node = world.nodes.get(action.node)
        if node is None:
            self._bad(world, f"{type(action).__name__} on unknown node {action.node}")
            return
        if node.name not in {n.name for n in world.managed()} and not self._detection(node, action):
            self._bad(world, f"{type(action).__name__} on {node.name}, which upgrader does not manage: {action}")
        if result is not Result.OK:
            return  # refused, conflicting or gone writes change nothing
        if isinstance(action, Transition):
            self._transition(world, node, action)
        elif isinstance(action, SetUnschedulable):
            self._cordon(world, node, action)
        elif isinstance(action, Evict):
            self._evict(world, node, action)
        elif isinstance(action, DeletePod):
            self._delete(world, node, action)
        elif isinstance(action, Annotate):
            pass

    @staticmethod
    def _detection(node: WNode, action: Action) -> bool:
        """What upgrader may write on a GPU node the skip label keeps out: detection's labels (an
        out-of-date node says upgrade-required, as in the GPU Operator), a stale block cleared,
        Events."""
        if isinstance(action, Event):
            return True
        if not (node.gpu and node.skipped):
            return False
        if isinstance(action, Transition):
            return (action.source, action.target) in SKIPPED_EDGES
        return isinstance(action, Annotate)

    def _bad(self, world: World, line: str) -> None:
        self.violations.append(f"t+{world.now - 1_700_000_000}s: {line}")

    def _transition(self, world: World, node: WNode, action: Transition) -> None:
        if (action.source, action.target) not in edges(self.policy):
            self._bad(world, f"{node.name}: {action.source} -> {action.target.value} is off the state machine")
        recorded = action.annotations.get(FAILED_REASON) and action.annotations.get(FAILED_AT)
        if action.target is S.FAILED and not recorded:
            self._bad(world, f"{node.name} failed without failed-reason/failed-at")
        if action.source is S.UPGRADE_REQUIRED and action.target is S.CORDON_REQUIRED:
            self._start(world, node)
        untouched = (S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED)
        requeued = action.target is S.UPGRADE_REQUIRED and action.source in untouched
        if requeued and node.unschedulable:
            # Only a node nothing disrupted yet (not cordoned) goes back to wait for its turn: one that
            # looks taken over (no start record of upgrader's), whoever put it there.
            self._bad(world, f"{node.name} sent back from {action.source.value} though it was cordoned")
        if action.source is S.POD_DELETION_REQUIRED:
            self._leave_deletion(world, node, action)
        restart_only = bool(node.annotations.get(RESTART_ONLY))
        if action.source is S.CORDON_REQUIRED and action.target is S.POD_RESTART_REQUIRED and not restart_only:
            self._bad(world, f"{node.name} went from cordon to the driver restart without a restart-only start")
        if action.source is S.FAILED:
            self._recover(world, node)

    def _leave_deletion(self, world: World, node: WNode, action: Transition) -> None:
        """GPU pod deletion ends when no GPU pod is left; it falls back to a drain (drain.enable)
        when it cannot finish: GPU pods the policy may not delete, or past its timeout."""
        pods = world.pods_on(node.name)
        left = [p.key for p in pods if p.gpus > 0 and not p.terminal and p.owner_kind != "DaemonSet"]
        gpu_pods = [p for p in pods if p.key in left]
        if action.target is S.POD_RESTART_REQUIRED and left:
            self._bad(world, f"{node.name} left pod-deletion-required with GPU pods left: {left}")
        if action.target is not S.DRAIN_REQUIRED or (self.policy.drain_every_node and not left):
            return
        deletion = self.policy.gpu_pod_deletion
        forbidden = [
            p.key
            for p in gpu_pods
            if (p.owner_kind is None and not deletion.force) or (p.empty_dir and not deletion.delete_empty_dir)
        ]
        timeout = deletion.timeout_seconds
        started = node.label_since
        clock = parse_or_none(node.annotations.get(STATE_SINCE))
        names_it = node.annotations.get(SINCE_STATE) == S.POD_DELETION_REQUIRED.value
        if node.hand_edited and clock is not None and names_it:
            # Set by hand away and back to the state its clock names (A-B-A): the label, the clock and
            # what it names are what they were, so nothing a pass reads tells it from a node that never
            # left the state; its wait counts from that clock.
            started = min(started, int(clock))
        timed_out = timeout > 0 and world.now - started >= timeout
        # Before its timeout the deletion gives up only once every GPU pod left is one it may not delete.
        if not timed_out and (not forbidden or sorted(forbidden) != sorted(left)):
            self._bad(
                world,
                f"{node.name} fell back to a drain {world.now - started}s into pod deletion "
                f"with {left} left, of which it may not delete {forbidden}",
            )

    def _recover(self, world: World, node: WNode) -> None:
        """A failed node leaves only for validation, once a driver pod is Ready at the newest revision:
        after a failed validation, only another one than the node failed with."""
        failed_validation = node.annotations.get(FAILED_STATE) == S.VALIDATION_REQUIRED.value
        recorded = node.annotations.get(FAILED_DRIVER_POD) if failed_validation else None
        ready = [
            p
            for p in world.driver_pods_on(node.name)
            if p.ready and p.active and p.labels.get(HASH_LABEL) == world.newest and p.uid != recorded
        ]
        if not ready:
            self._bad(world, f"{node.name} left upgrade-failed without a driver pod Ready at {world.newest}")

    def _start(self, world: World, node: WNode) -> None:
        """A node leaves upgrade-required: only in its turn, never while the rollout is halted.

        Its turn (docs/policy.md): no node of another domain is in progress; the rollout stays on the
        domain its last status named while that is unfinished, and otherwise takes the first
        unfinished domain in the order (canary first); the soak counts from the domain it left.
        """
        causes = halt_causes(world, self.policy)
        if causes:
            self._bad(world, f"{node.name} started while the rollout must not start nodes: {'; '.join(causes)}")
        managed = world.managed()
        sequence = domain_sequence(managed, self.policy)
        members = {d: [n for n in managed if n.zone == d] for d in sequence}

        def unfinished(domain: str) -> list[str]:
            canary = domain == sequence[0]
            return [n.name for n in members[domain] if not settled(world, n, self.policy, canary)]

        busy_elsewhere = [n.name for n in managed if n.state in IN_PROGRESS and n.zone != node.zone]
        if busy_elsewhere:
            self._bad(world, f"{node.name} (domain {node.zone}) started while {busy_elsewhere} of other domains run")
        busy = any(n.state in IN_PROGRESS for n in members[node.zone] if n is not node)
        last = world.previous_status.current_domain if world.previous_status is not None else None
        if last in sequence and last != node.zone and unfinished(last):
            self._bad(world, f"{node.name} (domain {node.zone}) started before domain {last} finished")
        if not (last == node.zone and unfinished(node.zone)):  # else it stays on its domain
            for i, domain in enumerate(sequence[: sequence.index(node.zone)]):
                left = unfinished(domain)
                if left:
                    what = "canary domain" if i == 0 else "domain"
                    self._bad(
                        world,
                        f"{node.name} (domain {node.zone}) started before {what} {domain} finished: "
                        f"{', '.join(f'{n}={world.nodes[n].state}' for n in left)}",
                    )
        k = sequence.index(node.zone)
        previous = last if last in sequence and last != node.zone else (sequence[k - 1] if k > 0 else None)
        soak = self.policy.failure_domains.soak_seconds
        if previous is not None and soak and not busy and not unfinished(previous):
            finished_at = max(n.label_since for n in members[previous])
            if world.now < finished_at + soak:
                self._bad(
                    world,
                    f"{node.name} started {world.now - finished_at}s after domain {previous} "
                    f"finished, inside soakSeconds {soak}",
                )

    def _cordon(self, world: World, node: WNode, action: SetUnschedulable) -> None:
        if action.unschedulable:
            # Its own cordon, or again in a later step after someone lifted it, or before a failed
            # node someone uncordoned recovers into validation (docs/policy.md).
            again = node.state in CORDONED | {S.FAILED} and not node.unschedulable
            if node.state is not S.CORDON_REQUIRED and not again:
                self._bad(world, f"{node.name} cordoned in {node.state}")
            return
        if node.state is not S.UNCORDON_REQUIRED:
            self._bad(world, f"{node.name} uncordoned in {node.state}")
        if node.foreign_cordon and node.foreign_cordon_seq < node.started_seq:
            self._bad(world, f"{node.name} was cordoned by someone else before upgrader started it, and got uncordoned")
        if node.foreign_cordon and node.our_cordon_seq < node.started_seq <= node.foreign_cordon_seq:
            # The window between the start's record and upgrader's own cordon (docs/policy.md#a-cordon-race).
            self._bad(world, f"{node.name} was cordoned by someone else after its start, before upgrader's cordon, "
                      "and got uncordoned")
        # Left: someone else lifting upgrader's cordon and cordoning the node again between two passes.
        # The node then looks exactly as upgrader left it (its record and mark), so that cordon is lifted.

    def _evict(self, world: World, node: WNode, action: Evict) -> None:
        pod = world.pods[action.uid]
        if node.state not in (S.POD_DELETION_REQUIRED, S.DRAIN_REQUIRED):
            self._bad(world, f"{pod.key} evicted from {node.name} in {node.state}")
        if pod.owner_kind == "DaemonSet":
            self._bad(world, f"DaemonSet pod {pod.key} evicted")
        if node.state is S.POD_DELETION_REQUIRED and pod.gpus == 0:
            self._bad(world, f"{pod.key} holds no GPU but was evicted in pod-deletion-required")

    def _delete(self, world: World, node: WNode, action: DeletePod) -> None:
        pod = world.pods[action.uid]
        if action.uid in world.refused:
            budget = world.refused[action.uid]
            self._bad(world, f"{pod.key} deleted after PodDisruptionBudget {budget} refused its eviction")
        if pod.kind != DRIVER:
            self._bad(world, f"{pod.key} ({pod.kind}) deleted: only driver pods may be deleted outright")
        if node.state is not S.POD_RESTART_REQUIRED:
            self._bad(world, f"driver pod {pod.key} deleted in {node.state}")
        if not node.unschedulable:
            self._bad(world, f"driver pod {pod.key} deleted on schedulable {node.name}")
        clients = [p.key for p in world.pods_on(node.name) if p.gpus > 0 and not p.terminal]
        restart_only = pod.digest == world.digests[world.newest]  # the module stays loaded
        if clients and not restart_only:
            self._bad(world, f"driver pod {pod.key} deleted while GPU pods still run on {node.name}: {clients}")
