"""`upgrader plan`'s waves: the scheduler `run` uses (`schedule.plan_starts`) replayed over the
fleet, each round's starts a wave, until every node that can start has one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from upgrader.core.model.findings import WARNING, Finding
from upgrader.core.model.states import WAS_UNSCHEDULABLE, State
from upgrader.core.model.views import NodeView
from upgrader.core.policy.policy import Policy
from upgrader.core.rollout.schedule import Nodes, canary_first, domain_of, domain_order, is_unavailable, plan_starts


class Planned(Protocol):
    """What the replay reads and sets of a node's plan (core/plan/report.py NodePlan)."""

    name: str
    action: str
    wave: int | None
    canary_first: bool
    findings: list[Finding]


def assign_waves(
    nodes: list[NodeView], plans: Mapping[str, Planned], policy: Policy, now: float, bystanders: Sequence[NodeView]
) -> None:
    """Replay the scheduler: each round's starts are a wave; started nodes then count as done.

    Each round shows `plan_starts` only what can change its answer: the next candidates of the
    domain being rolled (at most maxParallelUpgrades of them) and every node that is unavailable
    anywhere; done, available nodes elsewhere cannot change who starts. That keeps the replay
    linear in the fleet instead of quadratic.
    """
    # The replay orders the canary domain's first nodes itself (failureDomains.canaryNodes): its
    # windows hold only the nodes of one stage, which plan_starts could not stage from.
    no_soak = policy.model_copy(
        update={"failure_domains": policy.failure_domains.model_copy(update={"soak_seconds": 0, "canary_nodes": None})}
    )
    current: dict[str, NodeView] = {}
    for node in nodes:
        action = plans[node.name].action
        if action == "in-progress":
            plans[node.name].wave = 0
            node = replace(node, state=State.DONE, unschedulable=node.annotations.get(WAS_UNSCHEDULABLE) == "true")
        elif action == "upgrade":
            node = replace(node, state=State.UPGRADE_REQUIRED)
        elif action == "up-to-date":
            node = replace(node, state=State.DONE)
        current[node.name] = node
    background = {n.name for n in current.values() if is_unavailable(n)}
    held = [b for b in bystanders if is_unavailable(b)]
    size = len(current) + len(bystanders)
    limit = policy.max_parallel_upgrades or len(current)
    wave = 1
    order = domain_order(list(current.values()), no_soak)
    first = {n.name for n in canary_first([n for n in current.values() if domain_of(n, policy) == order[0]], policy)
             } if order else set()
    stages = [(d, stage) for d in order for stage in ((True, False) if d == order[0] and first else (False,))]
    for domain, canary_stage in stages:
        queue = sorted(
            (n for n in current.values() if domain_of(n, policy) == domain and n.state is State.UPGRADE_REQUIRED
             and (n.name in first) == canary_stage),
            key=lambda n: (not is_unavailable(n), n.name),
        )
        for n in queue if canary_stage else ():
            plans[n.name].canary_first = True
        while queue:
            window = [current[n.name] for n in queue[:limit]]
            names = {n.name for n in window}
            view = window + [current[b] for b in background if b not in names]
            starts = set(plan_starts(Nodes(view, bystanders=held, fleet_size=size), no_soak, now, True).starts)
            if not starts:
                break  # this domain cannot finish, so no later domain starts (as `run` would halt)
            for name in sorted(starts):
                plans[name].wave = wave
                current[name] = replace(current[name], state=State.DONE)
                if not is_unavailable(current[name]):
                    background.discard(name)
            queue = [n for n in queue[:limit] if n.name not in starts] + queue[limit:]
            wave += 1
        if queue:
            break
    stuck = [p for p in plans.values() if p.action == "upgrade" and p.wave is None]
    failed = sorted(p.name for p in plans.values() if p.action == "failed")
    for plan in stuck:
        why = (
            f"upgrade-failed node(s) {', '.join(failed)} keep an earlier domain from finishing"
            if failed
            else "the policy's budgets never admit it"
        )
        plan.findings.append(Finding("not-scheduled", WARNING, plan.name, f"would not start in this rollout: {why}"))
