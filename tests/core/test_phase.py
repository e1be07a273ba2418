"""The phase is judged once a pass, before the starts, and the status after them reports that verdict:
a start moves a node from upgrade-required to cordon-required and neither blocks nor fails one, so the
phase the starts were judged by is the phase the status says (core/rollout/phase.py)."""

from __future__ import annotations

from upgrader.core.model.actions import Action, Outcome, Result, Transition
from upgrader.core.model.states import State
from upgrader.core.model.views import Control
from upgrader.core.report.kinds import Phase
from upgrader.core.rollout.reconcile import reconcile

from .factories import NEW, OLD, T0, driver_pod, node, policy, snapshot
from .test_status import failed


def _landed(actions: list[Action]) -> list[Outcome]:
    return [Outcome(a, Result.OK) for a in actions]


def _starts(outcomes: list[Outcome]) -> list[str]:
    return [o.action.node for o in outcomes if isinstance(o.action, Transition)
            and o.action.source is State.UPGRADE_REQUIRED]


def test_a_pass_that_starts_nodes_reports_the_phase_it_judged_them_by() -> None:
    names = ["a1", "a2", "b1"]
    snap = snapshot([node(n, zone=n[0]) for n in names], [driver_pod(n, revision=OLD) for n in names])
    outcome = reconcile(snap, policy(maxParallelUpgrades=2, maxUnavailable=2), T0, _landed)
    assert sorted(outcome.started) == ["a1", "a2"]
    assert (outcome.before.phase, outcome.status.phase) == (Phase.RUNNING, Phase.RUNNING)
    assert outcome.status.nodes_by_state[State.CORDON_REQUIRED.value] == 2


def test_a_halted_pass_starts_nothing_and_its_status_gives_the_halt_it_was_judged_by() -> None:
    snap = snapshot(
        [failed("a1", "a"), node("a2", zone="a"), node("b1", zone="b")],
        [driver_pod(n, revision=OLD) for n in ("a1", "a2", "b1")],
    )
    outcome = reconcile(snap, policy(maxParallelUpgrades=0, maxUnavailable="100%"), T0, _landed)
    assert _starts(outcome.outcomes) == [] and outcome.started == []
    assert outcome.before.phase is Phase.HALTED and outcome.status.phase is Phase.HALTED
    assert outcome.before.halt_reason is not None
    assert outcome.before.halt_reason.startswith("a1 upgrade-failed in validation-required (canary domain a)")
    assert outcome.status.halt_reason == outcome.before.halt_reason
    assert outcome.status.message == f"halted: {outcome.before.halt_reason}"


def test_a_paused_pass_starts_nothing_and_keeps_the_halt_it_is_paused_over() -> None:
    snap = snapshot(
        [failed("a1", "a"), node("a2", zone="a")],
        [driver_pod("a1", revision=OLD), driver_pod("a2", revision=OLD)],
        control=Control(paused=True),
    )
    outcome = reconcile(snap, policy(maxParallelUpgrades=0, maxUnavailable="100%"), T0, _landed)
    assert outcome.started == []
    assert (outcome.before.phase, outcome.status.phase) == (Phase.PAUSED, Phase.PAUSED)
    assert outcome.status.halt_reason == outcome.before.halt_reason is not None


def test_a_fleet_with_nothing_left_to_upgrade_is_done_before_and_after() -> None:
    snap = snapshot([node("a1", State.DONE, zone="a")], [driver_pod("a1", revision=NEW)])
    outcome = reconcile(snap, policy(), T0, _landed)
    assert (outcome.before.phase, outcome.status.phase) == (Phase.DONE, Phase.DONE)
    assert outcome.status.message == "done: 1 of 1 nodes upgraded"
