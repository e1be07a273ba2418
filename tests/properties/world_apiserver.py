"""How the world answers upgrader's writes as the API server does (compare-and-swap labels, the
Eviction subresource against PodDisruptionBudgets, graceful deletion) and what a driver going down shows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from upgrader.core.model.actions import (
    Action,
    Annotate,
    DeletePod,
    Event,
    Evict,
    Result,
    SetLabels,
    SetUnschedulable,
    Transition,
    WriteStatus,
)
from upgrader.core.model.states import IN_PROGRESS, STATE_LABEL, State
from upgrader.core.report.document import read_status, to_dict

from .world_objects import CUDA_LABELS, DRIVER, GPUS, VALIDATOR, WNode, WPod
from .world_state import WorldState


class WorldApiServer(WorldState):
    """The API server's verdict on each write and its effect on the world (`World.apply` runs them)."""

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
        if isinstance(action, Annotate | SetUnschedulable | SetLabels):
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
            _merge(node.annotations, action.record)  # the record lands in the same request as the cordon
            node.uncordoned_by_other = False
            if not action.unschedulable:
                node.foreign_cordon = False  # one bit: whoever's cordon it was is gone
            else:
                node.our_cordon_seq = self.seq
            node.resource_version += 1
        elif isinstance(action, SetLabels):  # the restart's admission guard (core/node/fence.py)
            node = self.nodes[action.node]
            _merge(node.labels, action.labels)
            _merge(node.annotations, action.record)
            node.resource_version += 1
        elif isinstance(action, Evict | DeletePod):
            pod = next(p for p in self.pods.values() if p.uid == action.uid)
            self._terminate(pod)
        elif isinstance(action, Event):
            self.events.append(action)
        elif isinstance(action, WriteStatus):
            stored = to_dict(action.status)  # as the controller stores it, and reads it back next pass
            self.previous_status = read_status(json.loads(json.dumps(stored)))
            assert self.previous_status == action.status, "the status read back is not the one written"
            self.statuses.append(stored)

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


def _merge(target: dict[str, str], changes: Mapping[str, str | None]) -> None:
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
