"""A rollout's makespan on a virtual clock, against the lower bound of what the emulator imposes.

Per node, the emulator imposes one chain of delays (`drawn_parts`): the GPU pod's termination grace,
the paused operands' grace (the restart's admission guard, core/node/fence.py), the old driver pod's
grace, the DaemonSet recreating the driver pod, the new pod turning Ready, and the validators coming
back after it (recreated and Ready, as their DaemonSet brings them back once the guard is lifted).
Their sum is the node's *drawn work*, a true lower bound on its busy time. The controller moves a node
one state per pass, so on a pass grid the same node alone takes its *pass-aligned work*
(`aligned_work`): the drawn delays, each wait rounded up to the next pass, plus the passes that only
write (start, cordon, wait-for-jobs, evict, pause the operands, delete the driver pod, uncordon). With
per-node work w, parallelism m and a soak between domains, no schedule finishes before `lower_bound` =
sum over domains of max(max w, sum w / m), plus the soaks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from upgrader.controller.loop import Controller, PassReport
from upgrader.core.model.states import State
from upgrader.core.report.kinds import Phase
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.proving.invariants import RolloutRecorder

# The old driver pod's and the operands' terminationGracePeriodSeconds (fleets/builders.py).
DRIVER_GRACE = 1.0
OPERAND_GRACE = 1.0


@dataclass(frozen=True)
class Parts:
    """One node's drawn delays, in seconds, in the order they happen."""

    gpu_grace: float  # GPU pods terminate after eviction
    operand_grace: float  # the paused operands (validators, device plugin) terminate
    driver_grace: float  # the old driver pod terminates
    recreate: float  # the DaemonSet creates the new driver pod
    ready: float  # the new driver pod turns Ready
    validate: float  # validators come back after the driver: recreated, then Ready

    @property
    def total(self) -> float:
        return self.gpu_grace + self.operand_grace + self.driver_grace + self.recreate + self.ready + self.validate


def drawn_parts(settings: SimSettings, node: str, gpu_grace: float) -> Parts:
    """What the emulator imposes on `node` (the same draws it makes: `SimSettings.delay` is keyed by node
    and kind, so the validators' DaemonSet draws the driver's recreate and Ready delays)."""
    recreate = settings.delay("pod_recreate", node, settings.pod_recreate_delay)
    ready = settings.delay("pod_ready", node, settings.pod_ready_delay)
    return Parts(gpu_grace, OPERAND_GRACE, DRIVER_GRACE, recreate, ready, recreate + ready)


def aligned_work(parts: Parts, pass_seconds: float) -> float:
    """Start to upgrade-done for the node alone, with the controller passing every `pass_seconds`.

    A pass sees every timer due by its time and moves a node at most one state; the start pass is 0.
    """
    p = pass_seconds

    def next_pass(t: float) -> float:
        return math.ceil(t / p - 1e-9) * p

    evicted = 3 * p  # start -> cordon (p) -> wait-for-jobs (2p) -> evict (3p)
    pods_gone = next_pass(evicted + parts.gpu_grace)  # -> pod-restart-required
    paused = pods_gone + p  # the operands paused: their pods terminate
    driver_deleted = max(paused + p, next_pass(paused + parts.operand_grace))
    driver_ready = driver_deleted + parts.driver_grace + parts.recreate + parts.ready
    restarted = next_pass(driver_ready)  # -> validation-required; the operands come back
    validated = max(restarted + p, next_pass(restarted + parts.validate))  # -> uncordon-required
    return validated + p  # uncordon -> upgrade-done


def lower_bound(
    work: Mapping[str, float], domains: Mapping[str, list[str]], parallel: int, soak_seconds: float
) -> float:
    """Sum over domains of max(longest node, total work / parallelism), plus a soak between domains."""
    total = 0.0
    for nodes in domains.values():
        if nodes:
            w = [work[n] for n in nodes]
            total += max(max(w), sum(w) / parallel if parallel else 0.0)
    return total + soak_seconds * max(0, sum(1 for n in domains.values() if n) - 1)


@dataclass(frozen=True)
class Timeline:
    """What the recorder saw: the first start, the last upgrade-done, each node's busy time."""

    first_start: float
    last_done: float
    busy: dict[str, float]  # node -> left upgrade-required .. upgrade-done (its last start and finish)

    @property
    def makespan(self) -> float:
        return self.last_done - self.first_start


def timeline(recorder: RolloutRecorder, nodes: list[str]) -> Timeline:
    started: dict[str, float] = {s.node: s.time for s in recorder.starts()}
    done: dict[str, float] = {}
    for record in recorder.records:
        if record.state == State.DONE.value and record.node in started and record.time >= started[record.node]:
            done.setdefault(record.node, record.time)
    missing = [n for n in nodes if n not in done]
    if missing:
        raise ValueError(f"{len(missing)} nodes never reached upgrade-done, e.g. {missing[0]}")
    return Timeline(
        min(started[n] for n in nodes),
        max(done[n] for n in nodes),
        {n: done[n] - started[n] for n in nodes},
    )


def run_until_done(
    cluster: EmulatedCluster,
    controller: Controller,
    nodes: int,
    pass_seconds: float,
    max_seconds: float,
    on_pass: Callable[[int, PassReport], None] | None = None,
    skip_idle: bool = False,
    sync: Callable[[], None] | None = None,
) -> int:
    """Pass, then advance the clock, until `nodes` nodes are upgrade-done; returns the passes run.

    `skip_idle`: after a pass that wrote nothing (and not soaking between domains, which ends by the
    clock), jump straight to the first pass at or after the emulator's next timer. The passes
    skipped would have seen the same cluster and done nothing either, as long as no step's timeout
    ran out in between (then this run would halt, later): the rollout and its timings are the same
    as passing every `pass_seconds`, for fewer passes.
    `sync`: run before each pass (the watch-fed copy catching up with the cluster).
    Raises RuntimeError when the rollout halts or `max_seconds` of virtual time pass first.
    """
    passes, elapsed = 0, 0.0
    while elapsed <= max_seconds:
        if sync is not None:
            sync()
        report = controller.reconcile()
        passes += 1
        if on_pass is not None:
            on_pass(passes, report)
        status = report.status
        if status is not None and status.nodes_by_state.get(State.DONE.value) == nodes:
            return passes
        if status is not None and status.phase is Phase.HALTED:
            raise RuntimeError(f"rollout halted: {status.message}")
        step = pass_seconds
        soaking = status is not None and status.message.startswith("soaking")
        idle = skip_idle and not report.outcomes and report.error is None and not soaking
        due = cluster.store.timers.next_due() if idle else None
        if due is not None:
            step *= max(1, math.ceil((due - cluster.store.clock.now()) / pass_seconds - 1e-9))
        cluster.advance(step)
        elapsed += step
    raise RuntimeError(f"not done after {max_seconds:g} virtual seconds")
