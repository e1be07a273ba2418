"""A pass reports every label write it landed, for the transition counters: first labellings included."""

from __future__ import annotations

from upgrader.core.model.actions import Action, Outcome, Result
from upgrader.core.model.states import UNLABELLED
from upgrader.core.rollout.reconcile import reconcile

from .factories import NEW, OLD, T0, driver_pod, node, policy, snapshot


def _landed(actions: list[Action]) -> list[Outcome]:
    return [Outcome(a, Result.OK) for a in actions]


def test_a_nodes_first_labelling_is_reported_with_no_time_in_a_state() -> None:
    snap = snapshot(
        [node("behind", state=None), node("current", state=None)],
        [driver_pod("behind", revision=OLD), driver_pod("current", revision=NEW)],
    )
    outcome = reconcile(snap, policy(maxParallelUpgrades=0), T0, _landed)
    first = sorted(t for t in outcome.transitions if t[0] == UNLABELLED)
    assert first == [(UNLABELLED, "upgrade-done", None), (UNLABELLED, "upgrade-required", None)]
