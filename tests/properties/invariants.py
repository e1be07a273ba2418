"""The rollout's promises, judged against the world: per moment (`check_state`, `check_pass`) and the
definitions the per-write `Audit` (invariants_audit.py) shares.

Each definition here is written from docs/policy.md, not from the core's code, so a core that drifts
from the documentation is caught: domain order (canary first, the rest sorted, unlabelled last),
the budgets' arithmetic, what "settled" failures are, and who may uncordon what.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable

from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    FAILED_AT,
    FAILED_REASON,
    IN_PROGRESS,
    STATE_COUNT_KEYS,
    UNLABELLED,
    State,
)
from upgrader.core.model.timefmt import parse_or_none
from upgrader.core.policy.policy import OnNodeFailure, Policy
from upgrader.core.report.document import to_dict
from upgrader.sim.proving.recording import domain_order

from .world import PassResult, World
from .world_objects import WNode

S = State
# The state machine as docs/policy.md draws it ("One node's way"), plus detection's moves.
EDGES = {
    (None, S.UPGRADE_REQUIRED),
    (None, S.DONE),
    (S.DONE, S.UPGRADE_REQUIRED),
    (S.UPGRADE_REQUIRED, S.DONE),
    (S.UPGRADE_REQUIRED, S.CORDON_REQUIRED),
    (S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED),
    (S.WAIT_FOR_JOBS_REQUIRED, S.POD_DELETION_REQUIRED),
    (S.DRAIN_REQUIRED, S.POD_RESTART_REQUIRED),
    (S.POD_RESTART_REQUIRED, S.VALIDATION_REQUIRED),
    (S.VALIDATION_REQUIRED, S.POD_RESTART_REQUIRED),  # a newer driver revision came out meanwhile
    (S.VALIDATION_REQUIRED, S.UNCORDON_REQUIRED),
    (S.UNCORDON_REQUIRED, S.DONE),
    (S.CORDON_REQUIRED, S.POD_RESTART_REQUIRED),  # restart-only: the driver's install config is unchanged
    (S.POD_RESTART_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED),  # ... until it changed: the GPU pods go first
    (S.FAILED, S.VALIDATION_REQUIRED),  # the driver of a failed node came back
    (S.DONE, S.VALIDATION_REQUIRED),  # upgrade-done set by hand before the upgrade ended
    (S.CORDON_REQUIRED, S.UPGRADE_REQUIRED),  # taken over untouched: it waits for its turn (see the audit)
    (S.WAIT_FOR_JOBS_REQUIRED, S.UPGRADE_REQUIRED),
} | {(s, S.FAILED) for s in IN_PROGRESS}
# What detection may write on a node the skip label keeps out: its label (a skipped failed node is left
# to the person repairing it).
SKIPPED_EDGES = {
    (None, S.UPGRADE_REQUIRED),
    (None, S.DONE),
    (S.DONE, S.UPGRADE_REQUIRED),
    (S.UPGRADE_REQUIRED, S.DONE),
}
# States in which a node is cordoned, whatever happened (uncordon-required may be either: the
# uncordon lands before the transition to upgrade-done, and a crash can fall in between).
CORDONED = IN_PROGRESS - {S.CORDON_REQUIRED, S.UNCORDON_REQUIRED}

# Broken promises of upgrader/core found by these tests and not fixed yet. A line tagged with one of
# these is reported only under UPGRADER_PROPERTY_STRICT=1, so the searches stay meaningful for the
# rest; give each a deterministic reproduction marked xfail(strict=True). Fixed ones stay as
# regression tests in test_found_bugs.py.
KNOWN_BUGS: tuple[str, ...] = ()  # none open now
STRICT = os.environ.get("UPGRADER_PROPERTY_STRICT") == "1"


def open_violations(lines: Iterable[str]) -> list[str]:
    """`lines` without those of known, still open bugs (all of them under UPGRADER_PROPERTY_STRICT=1)."""
    return [line for line in lines if STRICT or not line.startswith(KNOWN_BUGS)]


def edges(policy: Policy) -> set[tuple[State | None, State]]:
    """Pod deletion goes on to the restart, or to a drain: always under drainEveryNode, else as the
    fallback when drain.enable is set (docs/policy.md)."""
    after = set()
    if not policy.drain_every_node:
        after.add((S.POD_DELETION_REQUIRED, S.POD_RESTART_REQUIRED))
    if policy.drain.enable:
        after.add((S.POD_DELETION_REQUIRED, S.DRAIN_REQUIRED))
    return EDGES | after


def domain_sequence(nodes: Iterable[WNode], policy: Policy) -> list[str]:
    """Domains in rollout order: the canary, then `order`, the rest sorted, unlabelled nodes last."""
    return domain_order({n.zone for n in nodes}, policy)


def max_unavailable(policy: Policy, total: int) -> int:
    value = policy.max_unavailable
    if isinstance(value, int):
        return value
    return math.ceil(int(value.rstrip("%")) * total / 100)


def acknowledged(world: World, node: WNode) -> bool:
    """A failure an operator acknowledged with `upgrader acknowledge` (docs: it names the failure as the
    controller recorded it, so a later failure of the same node is not acknowledged)."""
    recorded = node.annotations.get(FAILED_AT)
    return node.state is S.FAILED and recorded is not None and world.acknowledged.get(node.name) == recorded


def settled(world: World, node: WNode, policy: Policy, in_canary: bool) -> bool:
    """Done, or failed and left behind: acknowledged, or outside the canary under `continue`."""
    if node.state is S.DONE:
        return True
    if node.state is not S.FAILED:
        return False
    go_on = policy.on_node_failure is OnNodeFailure.CONTINUE and not in_canary
    return go_on or acknowledged(world, node)


def halt_causes(world: World, policy: Policy) -> list[str]:
    """Why no node may start now (docs: blocked nodes halt; unsettled failures halt; pause)."""
    managed = world.managed()
    sequence = domain_sequence(managed, policy)
    canary = sequence[0] if sequence else None
    causes = []
    if world.paused:
        causes.append("paused")
    if not policy.auto_upgrade:
        causes.append("autoUpgrade false")
    for n in managed:
        if n.state in IN_PROGRESS and n.annotations.get(BLOCKED_KIND):
            causes.append(f"{n.name} blocked ({n.annotations.get(BLOCKED_KIND)})")
        halting = n.zone == canary or policy.on_node_failure is OnNodeFailure.HALT
        if n.state is S.FAILED and not acknowledged(world, n) and halting:
            causes.append(f"{n.name} failed, unacknowledged")
    return causes


def upgrader_unavailable(world: World) -> list[str]:
    """Driver nodes unavailable because of upgrader (skipped ones included: a node upgrader cordoned
    counts whatever happened to its labels since): in progress, failed or cordoned by it, except nodes
    someone else had already cordoned when upgrader started them (those start for free)."""
    out = []
    for n in world.nodes.values():
        if not n.gpu or n.adopted:  # a node a person put in progress is theirs until it is done
            continue
        ours = n.state in IN_PROGRESS or n.state is S.FAILED or (n.unschedulable and not n.foreign_cordon)
        if ours and not (n.foreign_at_start and n.started_seq >= 0):
            out.append(n.name)
    return out


def check_state(world: World, policy: Policy) -> list[str]:
    """Promises that hold at every moment, whatever happened last."""
    bad = []
    managed = world.managed()
    in_progress = [n.name for n in managed if n.state in IN_PROGRESS]
    parallel = policy.max_parallel_upgrades
    # A person setting states by hand can put more nodes in progress; only upgrader moving one in on
    # the fleet as it is now can overspend the budget.
    moved_in = [n for n in in_progress if world.nodes[n].progress_seq > world.fleet_seq]
    if parallel and len(in_progress) > parallel and moved_in:
        bad.append(f"{len(in_progress)} nodes in progress {in_progress} > maxParallelUpgrades {parallel}")
    gpu_nodes = [n for n in world.nodes.values() if n.gpu]
    ours, limit = upgrader_unavailable(world), max_unavailable(policy, len(gpu_nodes))
    # An operator shrinking the fleet (skip labels) shrinks a percentage budget under nodes already
    # started; only a start made on the fleet as it is now can overspend it.
    since_change = [n for n in ours if world.nodes[n].started_seq > world.fleet_seq]
    if len(ours) > limit and since_change:
        bad.append(
            f"{len(ours)} nodes unavailable because of upgrader {ours} > maxUnavailable {limit} "
            f"(started on this fleet: {since_change})"
        )
    for n in world.nodes.values():
        if n.hand_edited:
            continue  # its label or records were edited by hand: the next pass takes it from there
        a = n.annotations
        if n.state is S.FAILED and not (a.get(FAILED_REASON) and parse_or_none(a.get(FAILED_AT))):
            bad.append(f"{n.name} is upgrade-failed without failed-reason/failed-at: {a}")
        if a.get(BLOCKED_KIND):
            if not (a.get(BLOCKED_REASON) and parse_or_none(a.get(BLOCKED_SINCE))):
                bad.append(f"{n.name} is blocked without blocked-reason/blocked-since: {a}")
            if n.state not in IN_PROGRESS:
                bad.append(f"{n.name} carries a block in {n.state}")
        if n.state in CORDONED | {S.FAILED} and not n.unschedulable and not n.uncordoned_by_other:
            bad.append(f"{n.name} is {n.state} but schedulable")
        # (Unless its cordon record was removed by hand: then nothing says the cordon is upgrader's.)
        if n.state is S.DONE and n.unschedulable and not n.foreign_cordon and not n.record_lost:
            bad.append(f"{n.name} is upgrade-done but left cordoned by upgrader")
    return bad


def state_counts(nodes: Iterable[WNode]) -> Counter[str]:
    """Nodes per state label value, UNLABELLED for a node without one."""
    return Counter(n.state.value if n.state is not None else UNLABELLED for n in nodes)


def expected_phase(world: World, policy: Policy) -> str:
    """The phase docs/policy.md gives the rollout in this state of the world."""
    causes = halt_causes(world, policy)
    if world.paused or not policy.auto_upgrade:
        return "Paused"
    if causes:
        return "Halted"
    if all(n.state in (S.DONE, S.FAILED) for n in world.managed()):
        return "Done"
    return "Running"


def check_pass(world: World, policy: Policy, result: PassResult) -> list[str]:
    """Promises about one pass: a halted or paused rollout starts nothing, and its status says what
    the cluster holds (the status is computed from the pass's snapshot with its successful writes
    folded in, which is the world as the pass leaves it)."""
    bad = []
    managed = world.managed()
    status = to_dict(result.status)  # as the cluster stores it: what people and scripts read
    for phase in (result.before.phase, status["phase"]):
        if phase in ("Halted", "Paused") and result.starts:
            bad.append(f"phase {phase} but the pass started {result.starts}")
    by_state = status["nodes_by_state"]
    if set(by_state) != set(STATE_COUNT_KEYS):
        bad.append(f"status nodes_by_state keys {sorted(by_state)} are not every state and {UNLABELLED}")
    if status["nodes_total"] != len(managed):
        bad.append(f"status nodes_total {status['nodes_total']}, managed {len(managed)}")
    if sum(by_state.values()) != len(managed):
        bad.append(f"status counts {sum(by_state.values())} nodes by state of {len(managed)} managed")
    held = state_counts(managed)
    wrong = [key for key in STATE_COUNT_KEYS if by_state.get(key) != held[key]]
    if wrong:
        bad.append(f"status nodes_by_state miscounts {wrong}: {by_state}")
    phase = expected_phase(world, policy)
    if status["phase"] != phase:
        bad.append(f"status phase {status['phase']} ({status['message']}), expected {phase}")
    lists = {
        "in_progress": [n.name for n in managed if n.state in IN_PROGRESS],
        "blocked": [n.name for n in managed if n.state in IN_PROGRESS and n.annotations.get(BLOCKED_KIND)],
        "failed": [n.name for n in managed if n.state is S.FAILED],
    }
    for key, names in lists.items():
        if sorted(entry["node"] for entry in status[key]) != sorted(names):
            bad.append(f"status {key} lists {[e['node'] for e in status[key]]}, the cluster has {names}")
    sequence = domain_sequence(managed, policy)
    if [d["name"] for d in status["domains"]] != sequence:
        bad.append(f"status domains {[d['name'] for d in status['domains']]}, expected {sequence}")
    for i, domain in enumerate(status["domains"]):
        members = [n for n in managed if n.zone == domain["name"]]
        expected = {
            "canary": i == 0,
            "nodes": len(members),
            "done": sum(1 for n in members if n.state is S.DONE),
            "failed": sum(1 for n in members if n.state is S.FAILED),
            "in_progress": sum(1 for n in members if n.state in IN_PROGRESS),
            "by_state": {key: state_counts(members)[key] for key in STATE_COUNT_KEYS},
        }
        got = {k: domain[k] for k in expected}
        if got != expected:
            bad.append(f"status domain {domain['name']}: {got}, expected {expected}")
    return bad
