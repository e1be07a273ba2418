"""Shared by the rollout property tests: the search sizes (UPGRADER_PROPERTY_*), hypothesis settings,
`settle` (a cluster without blockers catching up) and `coverage` (how far a run got, as events).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck
from hypothesis import strategies as st

from upgrader.core.model.actions import Annotate, Result, Transition
from upgrader.core.model.states import BLOCKED_KIND, IN_PROGRESS, State
from upgrader.core.policy.policy import Policy

from .invariants import domain_sequence
from .world import World

EXAMPLES = int(os.environ.get("UPGRADER_PROPERTY_EXAMPLES", "0"))
STEPS = int(os.environ.get("UPGRADER_PROPERTY_STEPS", "100"))
COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}
INDEX = st.integers(0, 63)  # picks one of the objects a rule could act on


def examples(default: int) -> int:
    return EXAMPLES or default


def settle(world: World) -> None:
    """A cluster without blockers, one requeue interval later: terminations finish, the DaemonSet
    brings drivers up, jobs on nodes being upgraded finish, ReplicaSets refill and turn Ready."""
    for pod in list(world.terminating()):
        world.disappear(pod.uid)
    for node in world.nodes_missing_driver():
        world.create_driver(node)
    for pod in world.starting_drivers():
        world.driver_ready(pod.uid)
    for pod in world.running_jobs():
        if world.nodes[pod.node].state in IN_PROGRESS:
            world.finish_job(pod.uid)
    for workload in world.workloads.values():
        while nodes := world.placements(workload):
            world.reschedule(workload.name, nodes[0], ready=True)
    for pod in world.unready_pods():
        world.pod_ready(pod.uid)


def coverage(world: World, policy: Policy, passes: int) -> list[str]:
    """How far a run got, as hypothesis events."""
    applied = [(a, r) for _, a, r in world.actions]
    reached = {a.target for a, r in applied if isinstance(a, Transition) and r is Result.OK}
    lines = [f"reached {s.value}" for s in State if s in reached]
    lines += sorted({f"{type(a).__name__} {r.value}" for a, r in applied if r is not Result.OK})
    if any(isinstance(a, Annotate) and a.annotations.get(BLOCKED_KIND) for a, _ in applied):
        lines.append("a node was blocked")
    managed = world.managed()
    later = set(domain_sequence(managed, policy)[1:])
    if any(n.zone in later and n.started_seq >= 0 for n in managed):
        lines.append("a domain after the canary started")
    if any(n.foreign_at_start for n in managed):
        lines.append("a node someone else cordoned was started")
    lines += sorted({f"phase {s['phase']}" for s in world.statuses})
    lines.append(f"passes {min(passes // 10 * 10, 50)}+")
    return lines
