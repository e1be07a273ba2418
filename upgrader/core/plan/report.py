"""`upgrader plan`: what a rollout would do and what would stop it, from the controller's own code.

Waves come from the same scheduler `upgrader run` uses (`schedule.plan_starts`), replayed until
every node that needs the new driver has a wave; evictions and blockers come from the same step
selection (`steps`). Pure: the inputs are views, `now` is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from typing import Any

from upgrader.core.compat.cuda import Floors
from upgrader.core.compat.images import node_image_tag
from upgrader.core.compat.profiles import Profile
from upgrader.core.fleet import pool_shares as pools
from upgrader.core.fleet.managed import CONFLICTING_DAEMONSETS, fleet
from upgrader.core.fleet.node_findings import (
    Workload,
    budget_findings,
    driver_pdb_findings,
    eligibility_findings,
    job_findings,
    pdb_findings,
    undeletable,
)
from upgrader.core.fleet.nvidia_drivers import DriverResource, gpu_nodes, selector_findings
from upgrader.core.fleet.preflight import PreflightInputs, node_findings
from upgrader.core.model.findings import BLOCKING, WARNING, Finding
from upgrader.core.model.gpupods import gpu_pods as holding_gpus
from upgrader.core.model.selectors import parse_label_selector
from upgrader.core.model.states import IN_PROGRESS, State
from upgrader.core.model.views import DriverSet, NodeView, PdbView, PodView, Snapshot
from upgrader.core.node.capacity import capacity_findings, evicted_gpu_pods
from upgrader.core.node.context import context, restart_only_digest
from upgrader.core.node.step_checks import drained, driver_version_label
from upgrader.core.plan.wave_windows import Prediction, for_plan
from upgrader.core.plan.waves import assign_waves
from upgrader.core.policy.policy import OnInsufficientCapacity, Policy
from upgrader.core.policy.windows import ALWAYS_OPEN, Verdict, verdict
from upgrader.core.rollout.detect import upgrade_reason
from upgrader.core.rollout.schedule import canary_domain, domain_of


@dataclass(frozen=True)
class PlanOptions:
    target_driver: str | None = None  # overrides each DaemonSet's DRIVER_VERSION
    ledger: frozenset[str] | None = None  # image tags known to exist
    profiles: Sequence[Profile] | None = None
    floors: Floors = field(default_factory=dict)  # --floor pins (core.compat)
    wave_duration: int | None = None  # seconds one wave takes (--wave-duration): which wave starts in which window


@dataclass
class NodePlan:
    name: str
    domain: str
    state: str | None
    action: str  # upgrade | in-progress | up-to-date | failed | skipped | invalid
    wave: int | None = None
    current_driver: str | None = None
    target_driver: str | None = None
    target_image: str | None = None
    image_in_ledger: bool | None = None
    gpu_pods: list[str] = field(default_factory=list)
    drain_pods: list[str] = field(default_factory=list)
    restart_only: bool = False  # DRIVER_CONFIG_DIGEST unchanged: the driver restarts under the GPU pods
    canary_first: bool = False  # one of the canary domain's first nodes (failureDomains.canaryNodes)
    findings: list[Finding] = field(default_factory=list)
    pool: str | None = None  # with policy pools: the pool the node is in (its waves are the pool's)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "domain": self.domain,
            "wave": self.wave,
            "state": self.state,
            "action": self.action,
            "current_driver": self.current_driver,
            "target_driver": self.target_driver,
            "target_image": self.target_image,
            "image_in_ledger": self.image_in_ledger,
            "gpu_pods": self.gpu_pods,
            "drain_pods": self.drain_pods,
            "restart_only": self.restart_only,
            "canary_first": self.canary_first,
            "pool": self.pool,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass
class Plan:
    nodes: list[NodePlan]
    findings: list[Finding]
    waves: list[dict[str, Any]]
    canary: str | None
    policy: Policy
    driver_nodes: int = 0  # the nodes a percentage maxUnavailable is of: every node with a driver
    window: Verdict = ALWAYS_OPEN  # maintenance windows at `now`: starts wait while none is open
    wave_windows: Prediction | None = None  # which wave starts in which window; None: the policy has none

    @property
    def max_unavailable_nodes(self) -> int:
        return self.policy.max_unavailable_nodes(self.driver_nodes)

    @property
    def blocking(self) -> bool:
        return any(f.severity == BLOCKING for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "canary_domain": self.canary,
            "waves": self.wave_windows.waves(self.waves) if self.wave_windows else self.waves,
            "nodes": [n.to_dict() for n in self.nodes],
            "findings": [f.to_dict() for f in self.findings],
            "summary": {
                "nodes": len(self.nodes),
                "to_upgrade": sum(1 for n in self.nodes if n.action in ("upgrade", "in-progress")),
                "blocking": sum(1 for f in self.findings if f.severity == BLOCKING),
                "warnings": sum(1 for f in self.findings if f.severity == WARNING),
                "max_parallel_upgrades": self.policy.max_parallel_upgrades,
                "max_unavailable": str(self.policy.max_unavailable),
                "max_unavailable_nodes": self.max_unavailable_nodes,
                "driver_nodes": self.driver_nodes,
                "soak_seconds": self.policy.failure_domains.soak_seconds,
                "budgets": budgets(self.policy, self.driver_nodes),
                "maintenance_window": asdict(self.window.report()) if self.window.windows else None,
                "wave_windows": self.wave_windows.to_dict() if self.wave_windows else None,
            },
        }


def budgets(policy: Policy, driver_nodes: int) -> str:
    """The budgets as `run` resolves them on this fleet: `maxUnavailable 10% of 40 nodes = 4`."""
    parallel = policy.max_parallel_upgrades
    limit = policy.max_unavailable_nodes(driver_nodes)
    unavailable = f"maxUnavailable {policy.max_unavailable}"
    if isinstance(policy.max_unavailable, str):
        unavailable += f" of {driver_nodes} node{'' if driver_nodes == 1 else 's'} = {limit}"
    if limit == 0:
        unavailable += " (only nodes already unavailable start)"
    return (
        f"maxParallelUpgrades {parallel}{' (no limit)' if parallel == 0 else ''}, {unavailable}, "
        f"soak {policy.failure_domains.soak_seconds}s between domains"
    )


def build_plan(
    snapshot: Snapshot,
    policy: Policy,
    now: float,
    options: PlanOptions,
    driver_resources: Sequence[DriverResource] = (),
) -> Plan:
    managed = fleet(snapshot)
    plans: dict[str, NodePlan] = {}
    pdbs_by_namespace: dict[str, list[PdbView]] = {}
    covering: dict[Workload, list[PdbView]] = {}
    for pdb in snapshot.pdbs:
        pdbs_by_namespace.setdefault(pdb.namespace, []).append(pdb)
    for name in managed.skipped:
        node = snapshot.nodes[name]
        plans[name] = NodePlan(name, domain_of(node, policy), _state(node), "skipped")
    for name, reason in managed.invalid:
        node = snapshot.nodes[name]
        plan = NodePlan(
            name, domain_of(node, policy), node.labels.get("nvidia.com/gpu-driver-upgrade-state"), "invalid"
        )
        plan.findings.append(invalid_finding(name, reason))
        plans[name] = plan
    for node in managed.managed:
        plans[node.name] = _node_plan(snapshot, node, policy, now, options, pdbs_by_namespace, covering)
    # Skipped and invalid nodes never start but count, as in `run`: in the base of a percentage, and
    # against the budget while unavailable.
    bystanders = [snapshot.nodes[n] for n in [*managed.skipped, *(n for n, _ in managed.invalid)]]
    scheduled = ("upgrade", "in-progress", "up-to-date", "failed")
    # With pools, each pool's waves are replayed under its own policy, side by side (core/fleet/pool_shares.py).
    parts = pools.shares(snapshot, policy, managed) if policy.pools else []
    for share in parts:
        for name in [*(n.name for n in share.managed), *share.skipped, *(n for n, _ in share.invalid)]:
            plans[name].pool = share.name
        nodes = [n for n in share.managed if plans[n.name].action in scheduled]
        held = [snapshot.nodes[n] for n in [*share.skipped, *(n for n, _ in share.invalid)]]
        assign_waves(nodes, plans, share.policy, now, held)
    if not parts:
        assign_waves([snapshot.nodes[n] for n in plans if plans[n].action in scheduled], plans, policy, now,
                      bystanders)
    _add_capacity_findings(snapshot, plans, policy)
    findings = [f for p in plans.values() for f in p.findings]
    findings.extend(pools.empty_findings(parts, policy))
    never = [p.name for p in plans.values() if p.action == "upgrade" and p.wave is None]
    findings.extend(budget_findings(policy, never))
    # Another writer would drive the drivers: `run` refuses to start (core/fleet/interlocks.py).
    findings.extend(Finding(i.kind, BLOCKING, None, i.text) for i in snapshot.interlocks)
    for finding in selector_findings(driver_resources, gpu_nodes(snapshot.nodes.values())):
        findings.append(finding)
        if finding.node in plans:
            plans[finding.node].findings.append(finding)
    findings.sort(key=lambda f: (f.severity != BLOCKING, f.node or "", f.kind))
    place = {share.name: i for i, share in enumerate(parts)}
    ordered = sorted(plans.values(), key=lambda p: (p.wave is None, p.wave or 0, place.get(p.pool or "", 0),
                                                    p.domain, p.name))
    waves: dict[tuple[str | None, int], dict[str, Any]] = {}
    for p in ordered:
        if p.wave is not None:
            first = {"wave": p.wave, "domain": p.domain, "nodes": [], **({"pool": p.pool} if p.pool else {})}
            wave_of = waves.setdefault((p.pool, p.wave), first)
            wave_of["nodes"].append(p.name)
            if p.canary_first:
                wave_of["canary_nodes"] = True
    canary = canary_domain(managed.managed, policy)
    size = len(managed.managed) + len(bystanders)
    # Which wave starts in which window is predicted for one sequence of waves: not for pools side by side.
    in_windows = None if parts else for_plan(list(waves.values()), policy, now, options.wave_duration)
    window = verdict(policy.windows(), now)
    return Plan(ordered, findings, list(waves.values()), canary, policy, size, window, in_windows)


def _add_capacity_findings(snapshot: Snapshot, plans: Mapping[str, NodePlan], policy: Policy) -> None:
    """`insufficient-gpu-capacity` on each node with a wave whose evicted GPU pods find no room."""
    upgrades = [
        (plan.name, plan.wave, evicted_gpu_pods(snapshot.node_pods.get(plan.name, []), snapshot.gpu_claims))
        for plan in plans.values()
        if plan.action in ("upgrade", "in-progress") and plan.wave is not None and not plan.restart_only
    ]
    waits = policy.gpu_capacity.on_insufficient is OnInsufficientCapacity.WAIT
    for finding in capacity_findings(upgrades, snapshot.nodes, snapshot.node_pods, waits):
        if finding.node is not None:
            plans[finding.node].findings.append(finding)


def _state(node: NodeView) -> str | None:
    return node.state.value if node.state else None


def invalid_finding(name: str, reason: str) -> Finding:
    """A node the rollout cannot manage: two driver DaemonSets fighting over it, or labels it cannot read."""
    if reason.startswith(CONFLICTING_DAEMONSETS):
        return Finding("conflicting-driver-daemonsets", BLOCKING, name, reason)
    return Finding("invalid-node-data", BLOCKING, name, f"{reason}: fix or remove the label")


def _node_plan(
    snapshot: Snapshot,
    node: NodeView,
    policy: Policy,
    now: float,
    options: PlanOptions,
    pdbs_by_namespace: Mapping[str, list[PdbView]],
    covering: dict[Workload, list[PdbView]],
) -> NodePlan:
    needs = upgrade_reason(snapshot, node) is not None
    if node.state is State.FAILED:
        action = "failed"
    elif node.state in IN_PROGRESS:
        action = "in-progress"
    else:
        action = "upgrade" if needs else "up-to-date"
    plan = NodePlan(node.name, domain_of(node, policy), _state(node), action)
    add = plan.findings.append
    try:
        plan.current_driver = driver_version_label(node)
        if plan.current_driver is not None:
            _check_version(plan.current_driver)
    except ValueError:
        add(
            Finding(
                "invalid-node-data",
                BLOCKING,
                node.name,
                f"driver version labels nvidia.com/cuda.driver.* read {plan.current_driver!r}: not a version; "
                "refusing to guess what runs there",
            )
        )
        plan.current_driver = None
    driver_set = _driver_set(snapshot, node)
    plan.target_driver = options.target_driver or (driver_set.driver_version if driver_set else None)
    if action == "failed":
        add(
            Finding(
                "failed-node",
                WARNING,
                node.name,
                "node is upgrade-failed: the rollout halts on it until it is relabelled upgrade-required "
                "or `upgrader acknowledge` acknowledges it",
            )
        )
    # --target-driver (a rollback's image check): every node whose driver would change is judged,
    # those up to date on their DaemonSet's revision included.
    changes = options.target_driver is not None and plan.current_driver != options.target_driver
    if plan.target_driver is None or (action not in ("upgrade", "in-progress") and not changes):
        return plan
    pods = snapshot.node_pods.get(node.name, [])
    ctx = context(snapshot, node.name, policy)
    restart_only = action == "upgrade" and restart_only_digest(ctx) is not None
    inputs = PreflightInputs(options.ledger, profiles=options.profiles, floors=options.floors)
    plan.findings.extend(node_findings(node, plan.target_driver, ctx.driver_set, pods, inputs, now, restart_only))
    with suppress(ValueError):  # a finding says why
        plan.target_image = node_image_tag(node, plan.target_driver)
    if plan.target_image and options.ledger is not None:
        plan.image_in_ledger = plan.target_image in options.ledger
    gpu_pods = [p for p in holding_gpus(pods, snapshot.gpu_claims) if not p.mirror]
    plan.gpu_pods = sorted(p.key for p in gpu_pods)
    if action in ("upgrade", "in-progress"):
        plan.findings.extend(driver_pdb_findings(node.name, ctx.driver_pods, pdbs_by_namespace))
    if restart_only:
        # Nothing that installs the driver changed: the driver restarts under its GPU pods.
        plan.restart_only = True
        return plan
    if action not in ("upgrade", "in-progress"):
        return plan  # judged for the target driver only: `run` would not start it
    deletable = [p for p in gpu_pods if p.owner_kind != "DaemonSet"]
    # A drain follows every deletion under drainEveryNode; otherwise only one that cannot finish.
    drained = policy.drain_every_node or (policy.drain.enable and bool(undeletable(deletable, policy)))
    drain_pods = [p for p in _drain_pods(pods, policy) if p not in gpu_pods] if drained else []
    plan.drain_pods = sorted(p.key for p in drain_pods)
    evicted = list(gpu_pods) + drain_pods
    plan.findings.extend(pdb_findings(node.name, evicted, pdbs_by_namespace, covering))
    plan.findings.extend(eligibility_findings(node.name, deletable, _drain_pods(pods, policy), policy))
    plan.findings.extend(job_findings(node.name, pods, policy))
    return plan


def _check_version(text: str) -> None:
    if not all(part.isdigit() for part in text.split(".")):
        raise ValueError(text)


def _driver_set(snapshot: Snapshot, node: NodeView) -> DriverSet | None:
    for pod in snapshot.driver_pods.get(node.name, []):
        ds = snapshot.driver_set_of(pod)
        if ds is not None:
            return ds
    return next((d for d in snapshot.driver_sets if d.selects(node)), None)


def _drain_pods(pods: list[PodView], policy: Policy) -> list[PodView]:
    if not policy.drain.enable:
        return []
    selector = parse_label_selector(policy.drain.pod_selector)
    return [p for p in pods if drained(p, selector)]
