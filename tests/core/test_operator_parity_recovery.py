"""GPU Operator parity: an upgrade-failed node recovers (back to validation) once its cause is fixed,
and only then."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.actions import (
    SetUnschedulable,
    Transition,
)
from upgrader.core.model.states import (
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_REASON,
    FAILED_STATE,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OUR_CORDON,
    SKIP_LABEL,
    STARTED_AT,
    STATE_SINCE,
    WAS_UNSCHEDULABLE,
)
from upgrader.core.rollout.detect import detect
from upgrader.core.rollout.stepping import project

from .factories import (
    NEW,
    OLD,
    T0,
    at,
    driver_pod,
    node,
    policy,
    run_step,
    snapshot,
    transition,
    validator,
)
from .operator_parity_fixtures import S


def _failed(**annotations: str) -> Any:
    return node(
        state=S.FAILED,
        unschedulable=True,
        annotations={STARTED_AT: at(-600), FAILED_AT: at(-60), FAILED_REASON: "image pull failed", **annotations},
    )


def test_a_failed_node_whose_driver_came_up_at_the_newest_revision_validates_again() -> None:
    snap = snapshot([_failed(**{WAS_UNSCHEDULABLE: "false"})], [driver_pod(revision=NEW, uid="fixed")])
    (moved,) = detect(snap, policy(), T0)
    assert isinstance(moved, Transition)
    assert (moved.source, moved.target) == (S.FAILED, S.VALIDATION_REQUIRED)
    assert moved.annotations[FAILED_AT] is None and moved.annotations[STATE_SINCE] == at(0)
    assert moved.message == (
        "driver pod gpu-operator/nvidia-driver-n1-rev-new is Running and Ready at revision rev-new since the node "
        "failed (image pull failed); validating the node again"
    )


@pytest.mark.parametrize(
    ("annotations", "record"),
    [({}, None), ({OPERATOR_INITIAL_UNSCHEDULABLE: "true"}, "true"), ({WAS_UNSCHEDULABLE: "false"}, "false")],
)
def test_a_recovered_node_keeps_only_a_cordon_record_it_can_prove(
    annotations: dict[str, str], record: str | None
) -> None:
    """A node failed by the GPU Operator, or labelled failed by hand, with no record of who cordoned it:
    the cordon stays on at the end, and the recovery says so (issue 11: never lift a cordon on a guess)."""
    (moved,) = detect(snapshot([_failed(**annotations)], [driver_pod(revision=NEW, uid="fixed")]), policy(), T0)
    assert isinstance(moved, Transition) and moved.annotations[WAS_UNSCHEDULABLE] == record
    assert moved.message is not None
    assert moved.message.endswith(
        "; no record says who cordoned it: it stays cordoned at the end unless "
        "gpu-upgrader.io/was-unschedulable=false is set (the GPU Operator's own cordon)"
    ) == (record is None)


@pytest.mark.parametrize(
    ("pods", "annotations"),
    [
        # Failed validation with the driver pod it still has (Ready or not when it failed).
        ([driver_pod(revision=NEW, uid="same")], {FAILED_DRIVER_POD: "same", FAILED_STATE: "validation-required"}),
        ([driver_pod(revision=NEW, ready=False)], {}),  # still not Ready
        ([driver_pod(revision=OLD)], {}),  # the old driver (a failure before the restart)
        ([driver_pod(revision=NEW, phase="Pending")], {}),
        ([driver_pod(revision=NEW, terminating=True)], {}),
    ],
)
def test_a_failed_node_stays_failed_until_its_driver_changed(pods: list[Any], annotations: dict[str, str]) -> None:
    assert detect(snapshot([_failed(**annotations)], pods), policy(), T0) == []


def test_after_a_failure_elsewhere_the_same_pod_coming_up_is_the_fix() -> None:
    """A pod stuck on a missing image (recorded, not Ready, as the node failed) that pulls once the
    image is published: that is the fix, so the node validates again."""
    failed = _failed(**{FAILED_DRIVER_POD: "stuck", FAILED_STATE: "pod-restart-required"})
    (moved,) = detect(snapshot([failed], [driver_pod(revision=NEW, uid="stuck")]), policy(), T0)
    assert isinstance(moved, Transition) and moved.target is S.VALIDATION_REQUIRED


def test_a_failure_records_the_driver_pod_at_the_newest_revision_ready_or_not() -> None:
    """So a driver that flaps Ready and not Ready cannot loop a node through validation forever."""
    view = node(state=S.VALIDATION_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})
    flapping = driver_pod(revision=NEW, uid="flapping", ready=False)
    _, actions = run_step(snapshot([view], [flapping, validator(ready=False)]), now=T0 + 600)
    failed = transition(actions)
    assert (failed.target, failed.annotations[FAILED_DRIVER_POD]) == (S.FAILED, "flapping")
    again = _failed(**{k: v for k, v in failed.annotations.items() if v is not None})
    back_up = driver_pod(revision=NEW, uid="flapping", ready=True)
    assert detect(snapshot([again], [back_up]), policy(), T0 + 700) == []


def test_a_skipped_failed_node_is_left_to_the_person_repairing_it() -> None:
    skipped = node(
        state=S.FAILED,
        unschedulable=True,
        labels={SKIP_LABEL: "true"},
        annotations={STARTED_AT: at(-600), FAILED_AT: at(-60), FAILED_STATE: "pod-restart-required"},
    )
    assert detect(snapshot([skipped], [driver_pod(revision=NEW)]), policy(), T0) == []


def test_a_node_the_operator_left_failed_is_upgraders_once_it_recovers() -> None:
    operator_failed = node(state=S.FAILED, unschedulable=True)  # no gpu-upgrader.io record at all
    actions = detect(snapshot([operator_failed], [driver_pod(revision=NEW)]), policy(), T0)
    moved = transition(actions)
    assert moved.annotations[STARTED_AT] == at(0)  # not adopted later


def test_a_recovery_waits_for_a_max_parallel_upgrades_slot() -> None:
    busy = node("n0", state=S.POD_RESTART_REQUIRED, annotations={STARTED_AT: at(0)})
    snap = snapshot([busy, _failed()], [driver_pod("n0", revision=OLD), driver_pod(revision=NEW, uid="fixed")])
    assert detect(snap, policy(maxParallelUpgrades=1), T0) == []
    assert len(detect(snap, policy(maxParallelUpgrades=2), T0)) == 1


def test_a_failed_node_someone_uncordoned_is_cordoned_again_before_it_validates() -> None:
    """Found by the property search: upgrade-failed set by hand on a done, schedulable node whose driver
    is current went to validation-required schedulable. The cordon goes back first, recorded as ours."""
    # Found again: an admin's record from before the start ("true") must not survive on our new cordon.
    marks = {FAILED_AT: at(-60), FAILED_REASON: "by hand", WAS_UNSCHEDULABLE: "true"}
    marks[OPERATOR_INITIAL_UNSCHEDULABLE] = "true"
    view = node(state=S.FAILED, unschedulable=False, annotations=marks)
    actions = detect(snapshot([view], [driver_pod(revision=NEW, uid="fixed")]), policy(maxParallelUpgrades=1), T0)
    assert actions[0] == SetUnschedulable(
        "n1", True, {WAS_UNSCHEDULABLE: "false", OPERATOR_INITIAL_UNSCHEDULABLE: None, OUR_CORDON: "true"}
    )
    assert not [a for a in actions if isinstance(a, Transition)], "it moves on once cordoned, at the next pass"
    cordoned = project(snapshot([view], [driver_pod(revision=NEW, uid="fixed")]), actions)
    actions = detect(cordoned, policy(maxParallelUpgrades=1), T0 + 1)
    (moved,) = [a for a in actions if isinstance(a, Transition)]
    assert (moved.source, moved.target) == (S.FAILED, S.VALIDATION_REQUIRED)
    assert moved.annotations[WAS_UNSCHEDULABLE] == "false"
    assert OPERATOR_INITIAL_UNSCHEDULABLE not in cordoned.nodes["n1"].annotations, "the admin's old record went"
