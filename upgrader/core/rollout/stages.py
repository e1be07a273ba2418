"""Stages of a rollout and what stands between them: the canary domain's first nodes
(failureDomains.canaryNodes) before the rest of it, and a domain before the next; between two
stages a soak (failureDomains.soakSeconds) and, where promotionGate asks, a person's promotion
(`upgrader promote`, spec.promotions), which also ends a soak early. A stage is named `<domain>` or
`<domain>/canaryNodes`; a promotion names the stage and when it finished (the newest state-since of
its nodes, as text), so a later finish of the same stage, in a later rollout, needs its own."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from upgrader.core.model.states import IN_PROGRESS, STATE_SINCE, State
from upgrader.core.model.timefmt import parse_or_none, rfc3339
from upgrader.core.model.views import NodeView
from upgrader.core.policy.policy import Policy, PromotionGate
from upgrader.core.rollout import waits
from upgrader.core.rollout.waits import Wait

CANARY_NODES = "canaryNodes"


def finished(node: NodeView, acknowledged: set[str], go_on: bool) -> bool:
    """Done, or failed and either acknowledged or left behind (`go_on`: onNodeFailure continue)."""
    return node.state is State.DONE or (node.state is State.FAILED and (go_on or node.name in acknowledged))


def canary_first(domain_nodes: Sequence[NodeView], policy: Policy) -> list[NodeView]:
    """The canary domain's nodes that go first (failureDomains.canaryNodes); [] when the whole domain
    is the canary. Finished nodes rank first, then those in progress, then by name: the choice holds
    as its nodes progress, and once it is finished it stays finished, whatever else changes."""
    count = policy.failure_domains.canary_count(len(domain_nodes))
    if count is None:
        return []
    return sorted(domain_nodes, key=lambda n: (_rank(n), n.name))[:count]


def _rank(node: NodeView) -> int:
    if node.state in (State.DONE, State.FAILED):
        return 0
    return 1 if node.state in IN_PROGRESS else 2


def canary_stage(
    domain: str,
    domain_nodes: list[NodeView],
    candidates: list[NodeView],
    policy: Policy,
    now: float,
    acknowledged: set[str],
    promoted: Mapping[str, str],
) -> list[NodeView] | Wait:
    """The canary domain's candidates: while its first nodes go, those of them still to start; once
    they are finished, the rest after their soak and, under promotionGate, a promotion. A Wait when
    none may start."""
    first = canary_first(domain_nodes, policy)
    if not first:
        return candidates
    names = {n.name for n in first}
    rest = [c for c in candidates if c.name not in names]
    unfinished = [n for n in first if not finished(n, acknowledged, go_on=False)]
    if unfinished:
        mine = [c for c in candidates if c.name in names]
        return mine or waits.canary_nodes(domain, unfinished, len(first), len(domain_nodes) - len(first),
                                          rest[0].name if rest else None)
    gate = policy.promotion_gate is not PromotionGate.NONE
    between = Between(f"{domain}/{CANARY_NODES}", f"{domain}'s {len(first)} canary nodes",
                      f"the rest of domain {domain}", gate)
    after = [n for n in domain_nodes if n.name not in names]
    wait = between.wait(first, after, policy, now, promoted, domain, rest[0].name if rest else None)
    return wait or candidates


class Between:
    """What stands between a finished stage and the next: its soak, then a promotion if `gated`."""

    def __init__(self, stage: str, what: str, then: str, gated: bool) -> None:
        self.stage, self.what, self.then, self.gated = stage, what, then, gated

    def wait(
        self, nodes: Sequence[NodeView], after: Sequence[NodeView], policy: Policy, now: float,
        promoted: Mapping[str, str], domain: str | None, next_: str | None,
    ) -> Wait | None:
        """The wait between `nodes` (the finished stage) and `after` (the next one's), or None."""
        # A lost clock reads as "just finished" (the soak waits) until the pass restamps it.
        finished_at = max((parse_or_none(n.annotations.get(STATE_SINCE)) or now) for n in nodes)
        stamp = rfc3339(finished_at)
        if promoted.get(self.stage) == stamp:
            return None  # promoted: its soak and its gate are over
        if begun(after, finished_at):
            return None  # the next stage is under way: a gate switched on since waits for the next boundary
        seconds = policy.failure_domains.soak_seconds
        if seconds and now < finished_at + seconds:
            left = math.ceil(finished_at + seconds - now)  # never "0s more" while still soaking
            return waits.soak(self.what, left, rfc3339(finished_at + seconds), seconds, domain, next_,
                              then=self.then, stage=(self.stage, stamp))
        if self.gated:
            return waits.awaiting_promotion(self.what, self.stage, stamp, self.then, domain, next_)
        return None


def begun(after: Sequence[NodeView], finished_at: float) -> bool:
    """Whether the stage after one finished at `finished_at` has begun: a node of it in progress, or
    finished since (upgraded in it; one current before, or with no clock, is not evidence)."""
    return any(
        n.state in IN_PROGRESS
        or (n.state in (State.DONE, State.FAILED) and (parse_or_none(n.annotations.get(STATE_SINCE)) or -math.inf)
            > finished_at)
        for n in after
    )


def domain_gate(policy: Policy, canary: bool, staged: bool) -> bool:
    """Whether the move on from a finished domain waits for a promotion: after the canary domain
    (`canary`), unless its first nodes were the canary (`staged`: failureDomains.canaryNodes), or
    after every domain."""
    gate = policy.promotion_gate
    if gate is PromotionGate.EVERY_DOMAIN:
        return True
    return gate is PromotionGate.CANARY and canary and not staged
