"""core/fleet/pdb_choice.py: a budget a disruption in progress spends holds no start (it comes back by
itself); one at full health that allows nothing still gets its one node, which then blocks and says so."""

from __future__ import annotations

from dataclasses import replace

from upgrader.core.fleet.pdb_choice import pdb_check
from upgrader.core.model.states import State

from .factories import node, pdb, pod, snapshot


def _check(budget: object) -> object:
    pods = [pod("web-1", "n1", gpus=1, labels={"app": "web"})]
    snap = snapshot([node("n1"), node("n2", State.DONE)], pods, pdbs=[budget])  # type: ignore[list-item]
    snap = replace(snap, candidate_pods=lambda name: [p for p in pods if p.node == name])
    check = pdb_check(snap)
    assert check is not None
    return check("n1", [])


def test_a_budget_spent_by_a_disruption_in_progress_holds_the_start() -> None:
    said = _check(pdb(allowed=0, healthy=1, expected=2))
    assert said == ("PodDisruptionBudget default/web allows 0 disruption(s) while a disruption is in progress "
                    "(currentHealthy 1 of 2) and 0 node(s) in progress or starting still evict under it")


def test_a_budget_at_full_health_that_allows_nothing_still_gets_its_one_node() -> None:
    assert _check(pdb(allowed=0, healthy=2, expected=2)) is None
    assert _check(pdb(allowed=1, healthy=2, expected=2)) is None
