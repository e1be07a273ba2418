"""The controller's carry (core/node/facts.py) in the property world: each pass reads views that stay
the same objects while the node or pod is unchanged, as the watch-fed copy hands them out, and keeps
a FactsCarry from pass to pass as `Controller` does. Before each pass the carried snapshot's
decisions are held equal to those of a fresh one: what the carry saves must never change an answer."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TypeVar

from upgrader.core.fleet.managed import fleet
from upgrader.core.model.views import NodeView, PodView, Snapshot
from upgrader.core.node.facts import FactsCarry
from upgrader.core.policy.policy import Policy
from upgrader.core.rollout.detect import detect
from upgrader.core.rollout.phase import Scope
from upgrader.core.rollout.starts import acknowledged_failures
from upgrader.core.rollout.status import rollout_status

V = TypeVar("V", NodeView, PodView)


@dataclass
class Carried:
    carry: FactsCarry = field(default_factory=FactsCarry)
    nodes: dict[str, NodeView] = field(default_factory=dict)
    pods: dict[str, PodView] = field(default_factory=dict)

    def snapshot(self, fresh: Snapshot) -> Snapshot:
        """`fresh` with every view that equals the one of the last pass replaced by that very object."""
        nodes = {name: _same(self.nodes, name, view) for name, view in fresh.nodes.items()}
        driver_pods = {
            node: [_same(self.pods, pod.key, pod) for pod in pods] for node, pods in fresh.driver_pods.items()
        }
        self.nodes, self.pods = nodes, {p.key: p for pods in driver_pods.values() for p in pods}
        return replace(fresh, nodes=nodes, driver_pods=driver_pods, carry=self.carry)


def _same(kept: dict[str, V], key: str, view: V) -> V:
    old = kept.get(key)
    return old if old is not None and old == view else view


def check_same_decisions(carried: Snapshot, fresh: Snapshot, policy: Policy, now: float) -> None:
    assert detect(carried, policy, now) == detect(fresh, policy, now), "detect differs with the carry"
    split, plain = fleet(carried), fleet(fresh)
    assert split == plain, "the fleet split differs with the carry"
    acknowledged = acknowledged_failures(fresh)
    with_carry = rollout_status(carried, policy, Scope(split), now, acknowledged)
    without = rollout_status(fresh, policy, Scope(plain), now, acknowledged)
    assert with_carry == without, "the status differs with the carry"
