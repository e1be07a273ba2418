"""Helpers of the start-scheduling tests: fleets of node views by (name, zone, state), and the nodes
plan_starts would start."""

from __future__ import annotations

from typing import Any

from upgrader.core.model.states import State
from upgrader.core.model.views import NodeView
from upgrader.core.policy.policy import Policy
from upgrader.core.rollout.schedule import Nodes, Standing, plan_starts

from .factories import T0, node

S = State
REQ, DONE, FAILED = S.UPGRADE_REQUIRED, S.DONE, S.FAILED


def fleet(*specs: tuple[Any, ...]) -> list[NodeView]:
    """Nodes from (name, zone, state) or (name, zone, state, {node() keywords})."""
    return [
        node(name, state, zone=zone, **(extra[0] if extra else {})) for name, zone, state, *extra in specs
    ]


def starts(
    nodes: list[NodeView],
    pol: Policy | None = None,
    now: float = T0,
    may_start: bool = True,
    acknowledged: set[str] | None = None,
) -> list[str]:
    return plan_starts(Nodes(nodes), pol or Policy(), now, may_start, Standing(acknowledged or set())).starts
