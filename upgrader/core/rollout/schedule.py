"""Which nodes start now: failure domains in order (canary first), soak between domains, and the
maxParallelUpgrades / maxUnavailable budgets.

How nodes count (documented in docs/policy.md):
- in progress: states cordon-required .. uncordon-required; at most maxParallelUpgrades (0 = no limit).
- unavailable: driver nodes that are in progress, failed (left cordoned), cordoned by anyone, or
  NotReady, skipped nodes and nodes with an unreadable label included (a percentage is of all of
  them, as in the GPU Operator). Starting a node that is already unavailable (e.g. cordoned by
  someone else) does not spend budget, so such nodes go first within their domain.
- a domain is finished when each of its nodes is upgrade-done or failed, a failure counting only
  once acknowledged (`upgrader acknowledge`), or at once under onNodeFailure: continue outside the canary
  domain (the rollout goes on without the node). The next domain starts soakSeconds after the last
  node of the previous one finished.
- a domain with a node in progress is the current one, whatever the policy says; nodes of two
  domains in progress at once start nothing (see `pick_domain`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from upgrader.core.fleet.pdb_choice import PdbCheck
from upgrader.core.fleet.preflight import Hold
from upgrader.core.model.states import IN_PROGRESS, State
from upgrader.core.model.views import NodeView
from upgrader.core.policy.alert_gate import GATE_OPEN, GateVerdict
from upgrader.core.policy.parts import NO_DOMAIN as NO_DOMAIN  # re-exported: where callers look
from upgrader.core.policy.policy import OnNodeFailure, Policy
from upgrader.core.policy.windows import ALWAYS_OPEN, Verdict
from upgrader.core.rollout import waits
from upgrader.core.rollout.stages import Between, canary_first, canary_stage, domain_gate, finished
from upgrader.core.rollout.waits import Wait

PDB_SCAN = 64  # candidates a pass holds for their budgets at most: each costs a read of the node's pods
# Why a node about to start would leave evicted GPU pods without room (None: they fit), given the
# nodes starting before it in the same pass. See core/node/capacity.py.
RoomCheck = Callable[[str, Collection[str]], "str | None"]
# Why the preflight holds a node about to start (a blocking `plan` finding), or None. See core/fleet/preflight.py.
HoldCheck = Callable[[str], "Hold | None"]


@dataclass(frozen=True)
class Schedule:
    starts: list[str]
    current_domain: str | None
    wait: Wait | None  # why no node starts, when none does though some wait
    domains: list[str]
    in_progress: int
    unavailable: int
    max_unavailable: int
    window: Verdict = ALWAYS_OPEN  # the maintenance-window verdict the schedule was made under
    gate: GateVerdict = GATE_OPEN  # the alert gate's verdict it was made under
    judged: tuple[tuple[str, Hold | None], ...] = ()  # the candidates the preflight judged, and its answer

    @property
    def waiting(self) -> str | None:
        return self.wait.text if self.wait else None


def domain_of(node: NodeView, policy: Policy) -> str:
    return policy.failure_domains.domain_of(node.labels)


def domain_order(nodes: list[NodeView], policy: Policy) -> list[str]:
    """Policy order first, the rest sorted, nodes without the label last; the canary leads."""
    domains = policy.failure_domains
    return domains.ordered(domains.domain_of(n.labels) for n in nodes)


def canary_domain(nodes: list[NodeView], policy: Policy) -> str | None:
    order = domain_order(nodes, policy)
    return order[0] if order else None


def is_unavailable(node: NodeView) -> bool:
    return node.unschedulable or not node.ready or node.state in IN_PROGRESS or node.state is State.FAILED


def pick_domain(
    order: list[str],
    by_domain: dict[str, list[NodeView]],
    policy: Policy,
    acknowledged: set[str],
    last: str | None,
) -> tuple[str | None, str | None, list[str]]:
    """The domain the rollout is on, the domain finished just before it (for the soak), and the other
    domains with nodes in progress (then no node may start at all).

    The order is a property of the cluster's state, not of the policy text alone. The rollout stays on
    `last` (the current domain of the last status written) until it is finished, and only then takes
    the first unfinished domain in the order: a node of an earlier domain that needs the upgrade again
    waits for that turn, and a new driver after a finished rollout starts with the canary again. Nodes
    in progress in another domain (the order, a zone label or the fleet changed, a second replica had
    another order) finish first, and nothing starts meanwhile.
    """

    def domain_finished(domain: str) -> bool:
        # The canary (first) domain's failures always wait for an acknowledgement.
        go_on = policy.on_node_failure is OnNodeFailure.CONTINUE and domain != order[0]
        return all(finished(n, acknowledged, go_on) for n in by_domain[domain])

    unfinished = [d for d in order if not domain_finished(d)]
    active = [d for d in order if any(n.state in IN_PROGRESS for n in by_domain[d])]
    if not unfinished:
        return None, None, []
    current = last if last in unfinished and last is not None else unfinished[0]
    elsewhere = [d for d in active if d != current]
    if elsewhere:
        return current, None, elsewhere
    # The soak counts from the domain finished just before this one: the last one the rollout was on
    # when it moves on, or the one before this in the order.
    index = order.index(current)
    before = last if last in order and last != current else (order[index - 1] if index > 0 else None)
    return current, (before if before is not None and domain_finished(before) else None), []


@dataclass(frozen=True)
class Grouping:
    """The managed nodes by failure domain, counted: what plan_starts reads of the whole fleet.
    A pass has it from its census (core/rollout/census.py), kept while no node changes."""

    order: list[str]  # domain_order
    by_domain: dict[str, list[NodeView]]
    in_progress: int
    unavailable: int  # of the managed nodes (bystanders apart)


def group(nodes: list[NodeView], policy: Policy) -> Grouping:
    order = domain_order(nodes, policy)
    by_domain: dict[str, list[NodeView]] = {d: [] for d in order}
    for node in nodes:
        by_domain[domain_of(node, policy)].append(node)
    in_progress = sum(1 for n in nodes if n.state in IN_PROGRESS)
    return Grouping(order, by_domain, in_progress, sum(1 for n in nodes if is_unavailable(n)))


@dataclass(frozen=True)
class Nodes:
    """The nodes a schedule is made over. `managed`: the managed nodes. `bystanders`: the other driver
    nodes (skipped, or with a label that cannot be read): never started, but a cordoned or NotReady
    one takes its share of maxUnavailable all the same, as in the GPU Operator, which counts every
    node with a driver. A node upgrader cordoned keeps counting whatever its label was changed to.
    `fleet_size` scales a percentage maxUnavailable when `managed` is a subset that leaves out nodes
    which cannot matter (done, available, not in the current domain), as the plan's wave replay does.
    `grouping`: `group(managed, policy)`, when the caller has it already (core/rollout/census.py)."""

    managed: list[NodeView]
    bystanders: Sequence[NodeView] = ()
    fleet_size: int | None = None
    grouping: Grouping | None = None


@dataclass(frozen=True)
class Standing:
    """What earlier passes and people settled, that the schedule goes on from: the failures that no
    longer hold a domain (acknowledged, or let go under onNodeFailure: continue), the current domain
    the last status recorded (see `pick_domain`), and the stages a person promoted, each with the
    finish it promoted (core/rollout/stages.py)."""

    settled_failures: Collection[str] = frozenset()
    last_domain: str | None = None
    promoted: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Checks:
    """What this pass judges a start by, beside the budgets. `window`: the maintenance-window verdict
    at `now`: while it is closed no node starts, and the wait says when the next window opens (nodes
    in progress go on in their own steps). `gate`: the alert gate's verdict: while a matching alert
    fires or Prometheus cannot say, no node starts either, in this domain or, after a soak, the next.
    `room` (gpuCapacity.onInsufficient: wait) holds a node whose evicted GPU pods would find no room;
    `hold` (run's preflight) one with a blocking finding; `pdbs` (pdbAwareStarts) one whose GPU pods
    sit behind a budget the nodes in progress use up (core/fleet/pdb_choice.py). The next candidate
    may start instead of a held one, until PDB_SCAN are held for their budgets; when none starts, the
    wait names the nodes held."""

    window: Verdict = ALWAYS_OPEN
    gate: GateVerdict = GATE_OPEN
    room: RoomCheck | None = None
    hold: HoldCheck | None = None
    pdbs: PdbCheck | None = None


def plan_starts(
    fleet: Nodes, policy: Policy, now: float, may_start: bool,
    standing: Standing = Standing(), checks: Checks = Checks(),
) -> Schedule:
    """Which of `fleet`'s nodes start now, or why none does; `may_start` is False while paused or
    halted (the schedule is still made, to say where the rollout is, but its wait is the status's)."""
    nodes, bystanders, grouping = fleet.managed, fleet.bystanders, fleet.grouping
    window, gate, room, hold, pdbs = checks.window, checks.gate, checks.room, checks.hold, checks.pdbs
    acknowledged_failures, last_domain = set(standing.settled_failures), standing.last_domain
    grouped = grouping if grouping is not None else group(nodes, policy)
    order, by_domain, in_progress = grouped.order, grouped.by_domain, grouped.in_progress
    unavailable = grouped.unavailable + sum(1 for n in bystanders if is_unavailable(n))
    size = len(nodes) + len(bystanders) if fleet.fleet_size is None else fleet.fleet_size
    max_unavailable = policy.max_unavailable_nodes(size)
    judged: list[tuple[str, Hold | None]] = []

    def result(starts: list[str], domain: str | None, wait: Wait | None = None) -> Schedule:
        return Schedule(
            starts,
            domain,
            wait if may_start else None,  # halted or paused: the status says why instead
            order,
            in_progress + len(starts),
            unavailable + sum(1 for s in starts if not is_unavailable(_node(nodes, s))),
            max_unavailable,
            window,
            gate,
            tuple(judged),
        )

    current, previous, elsewhere = pick_domain(order, by_domain, policy, acknowledged_failures, last_domain)
    if current is None:
        return result([], None)
    candidates = sorted((n for n in by_domain[current] if n.state is State.UPGRADE_REQUIRED), key=_start_order)
    next_ = candidates[0].name if candidates else None
    if elsewhere:
        busy = [n for d in elsewhere for n in by_domain[d] if n.state in IN_PROGRESS]
        return result([], current, waits.other_domain(elsewhere, current, busy, next_))
    promoted = standing.promoted
    if current == order[0]:
        staged = canary_stage(current, by_domain[current], candidates, policy, now, acknowledged_failures, promoted)
        if isinstance(staged, Wait):
            return result([], current, staged)
        candidates = staged
        next_ = candidates[0].name if candidates else next_
    if previous is not None:
        gated = domain_gate(policy, previous == order[0], bool(canary_first(by_domain[previous], policy)))
        between = Between(previous, f"domain {previous}", f"domain {current}", gated)
        wait = between.wait(by_domain[previous], by_domain[current], policy, now, promoted, current, next_)
        if wait is not None:
            return result([], current, wait)
    if not may_start:
        return result([], current)
    if not candidates:
        return result([], current, _next_domain_waits(order, by_domain, current, policy, acknowledged_failures))
    if not window.open:
        return result([], current, waits.window_closed(window, current, next_))
    if not gate.open:
        return result([], current, waits.alert_gate(gate, current, next_))
    parallel = policy.max_parallel_upgrades
    slots = (parallel - in_progress) if parallel else len(candidates)
    budget = max_unavailable - unavailable
    starts: list[str] = []
    held: list[tuple[str, str]] = []
    kept: list[tuple[str, Hold]] = []
    behind_pdb: list[tuple[str, str]] = []
    for node in candidates:
        if len(starts) >= slots:
            break
        cost = 0 if is_unavailable(node) else 1
        if cost and cost > budget:  # a free start stays free when others overspent the budget
            continue
        holding = hold(node.name) if hold is not None else None
        if hold is not None:
            judged.append((node.name, holding))
        if holding is not None:
            kept.append((node.name, holding))
            continue
        if pdbs is not None and len(behind_pdb) >= PDB_SCAN:
            break  # judged as many as a pass reads: the rest wait their turn rather than start unjudged
        behind = pdbs(node.name, starts) if pdbs is not None else None
        if behind is not None:
            behind_pdb.append((node.name, behind))
            continue
        short = room(node.name, starts) if room is not None else None
        if short is not None:
            held.append((node.name, short))
            continue
        budget -= cost
        starts.append(node.name)
    if starts:
        return result(starts, current)
    if kept:
        return result([], current, waits.preflight_hold(kept, current))
    if held:
        return result([], current, waits.gpu_capacity(held, current))
    if behind_pdb:
        return result([], current, waits.pdb_capacity(behind_pdb, current))
    if parallel and in_progress >= parallel:
        wait = waits.max_parallel(parallel, [n for n in nodes if n.state in IN_PROGRESS], current, next_)
    elif max_unavailable == 0:
        wait = waits.max_unavailable_zero(max_unavailable, [n.name for n in candidates], current)
    else:
        holders = [waits.behind(n) for n in nodes if is_unavailable(n)]
        holders += [waits.behind(n, bystander=True) for n in bystanders if is_unavailable(n)]
        wait = waits.max_unavailable(max_unavailable, holders, current, next_)
    return result([], current, wait)


def _next_domain_waits(
    order: list[str],
    by_domain: dict[str, list[NodeView]],
    current: str,
    policy: Policy,
    acknowledged: set[str],
) -> Wait | None:
    """The domain the rollout is on has nothing left to start: the next domain with a node to start
    waits for it to finish (None when no node waits anywhere)."""
    queued = {d: [n for n in by_domain[d] if n.state is State.UPGRADE_REQUIRED] for d in order if d != current}
    waiting = next((d for d, nodes in queued.items() if nodes), None)
    if waiting is None:
        return None
    go_on = policy.on_node_failure is OnNodeFailure.CONTINUE and current != order[0]
    unfinished = [n for n in by_domain[current] if not finished(n, acknowledged, go_on)]
    first = min(queued[waiting], key=_start_order)
    return waits.previous_domain(current, current == order[0], unfinished, waiting, first.name)


def _start_order(node: NodeView) -> tuple[bool, str]:
    """Nodes already unavailable first (they start without spending budget), then by name."""
    return not is_unavailable(node), node.name


def _node(nodes: list[NodeView], name: str) -> NodeView:
    return next(n for n in nodes if n.name == name)
