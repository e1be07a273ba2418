"""The cordon and uncordon steps (whose cordon it is), what reaching done clears, and that every
in-progress state has a step.
"""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.actions import Annotate, Event, Outcome, Result, SetUnschedulable, Transition
from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    DRIVER_POD_UID,
    FAILED_KIND,
    GPU_BEFORE,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OUR_CORDON,
    PER_UPGRADE,
    REQUESTED_ANNOTATION,
    STARTED_AT,
    STATE_SINCE,
    TARGET_REVISION,
    WAS_UNSCHEDULABLE,
)
from upgrader.core.node.cordon import OURS
from upgrader.core.policy.policy import Policy

from .factories import NEW, T0, at, node, run_step, snapshot, step, transition
from .steps_fixtures import S, blocked, moved

# ----- cordon ------------------------------------------------------------------------------------------


def test_cordon_marks_the_node_unschedulable_then_moves_on() -> None:
    view = node(state=S.CORDON_REQUIRED, since=0, annotations={WAS_UNSCHEDULABLE: "false"})
    plan, actions = run_step(snapshot([view]), now=T0 + 5)
    assert plan.attempts == [SetUnschedulable("n1", True, OURS)]
    assert actions == [moved(S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED, T0 + 5)]


@pytest.mark.parametrize("record", [None, "true"])
def test_a_cordon_upgrader_sets_itself_is_recorded_as_its_own_in_the_same_request(record: str | None) -> None:
    """Found by the property search: an admin's cordon at the start, lifted by the admin before upgrader
    cordoned: the cordon upgrader sets is its own and is lifted at the end. The record and upgrader's
    mark go in the cordon's own request (guarded by the node's resourceVersion)."""
    marks = {} if record is None else {WAS_UNSCHEDULABLE: record, OPERATOR_INITIAL_UNSCHEDULABLE: "true"}
    plan, _ = run_step(snapshot([node(state=S.CORDON_REQUIRED, since=0, annotations=marks)]), now=T0 + 5)
    assert plan.attempts == [
        SetUnschedulable(
            "n1", True, {WAS_UNSCHEDULABLE: "false", OPERATOR_INITIAL_UNSCHEDULABLE: None, OUR_CORDON: "true"}
        ),
    ]


def test_a_cordon_someone_set_after_the_start_before_ours_is_theirs_and_stays() -> None:
    """The race: the start recorded a schedulable node; an admin cordoned it before upgrader's cordon.
    No mark of upgrader's is on it, so the cordon is the admin's: recorded so, said, and kept."""
    view = node(state=S.CORDON_REQUIRED, since=0, unschedulable=True, annotations={WAS_UNSCHEDULABLE: "false"})
    plan, actions = run_step(snapshot([view]), now=T0 + 5)
    assert plan.attempts == [
        Annotate("n1", {WAS_UNSCHEDULABLE: "true", OPERATOR_INITIAL_UNSCHEDULABLE: "true"}),
        Event(
            "n1",
            "Warning",
            "cordoned by someone else after its upgrade started, before upgrader's cordon: it stays cordoned after "
            "the upgrade",
        ),
    ]
    assert actions == [moved(S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED, T0 + 5)]


def test_upgraders_own_cordon_found_after_a_crash_is_still_its_own() -> None:
    """Our cordon landed (with its mark) and the process died before the transition: still ours."""
    marks = {WAS_UNSCHEDULABLE: "false", OUR_CORDON: "true"}
    plan, actions = run_step(snapshot([node(state=S.CORDON_REQUIRED, since=0, unschedulable=True, annotations=marks)]),
                             now=T0 + 5)
    assert plan.attempts == []
    assert actions == [moved(S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED, T0 + 5)]


def test_cordon_skips_the_patch_when_already_unschedulable() -> None:
    plan, actions = run_step(snapshot([node(state=S.CORDON_REQUIRED, since=0, unschedulable=True)]), now=T0 + 5)
    assert plan.attempts == []
    assert actions == [moved(S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED, T0 + 5)]


@pytest.mark.parametrize("result", [Result.ERROR, Result.CONFLICT])
def test_a_failed_write_is_retried_next_pass_not_concluded(result: Result) -> None:
    snap = snapshot([node(state=S.CORDON_REQUIRED, since=0)])
    _, plan = step(snap)
    _, actions = run_step(snap, now=T0 + 5, outcomes=[Outcome(plan.attempts[0], result, "etcdserver: timeout")])
    assert actions == []


# ----- uncordon and done ----------------------------------------------------------------------------------

UPGRADE_ANNOTATIONS = {
    STARTED_AT: at(-1000),
    GPU_BEFORE: "8",
    DRIVER_POD_UID: "driver-old",
    TARGET_REVISION: NEW,
    REQUESTED_ANNOTATION: "true",
    "example.com/keep-me": "yes",
}


@pytest.mark.parametrize(
    ("was", "unschedulable", "attempts"),
    [
        ("false", True, [SetUnschedulable("n1", False, {OUR_CORDON: None})]),
        ("true", True, []),  # someone else had cordoned it before us: it stays cordoned
        ("false", False, []),  # already schedulable
        (None, False, []),  # someone uncordoned it: nothing to decide
    ],
)
def test_uncordon_respects_who_cordoned_the_node(was: str | None, unschedulable: bool, attempts: list[Any]) -> None:
    annotations = dict(UPGRADE_ANNOTATIONS)
    if was is not None:
        annotations[WAS_UNSCHEDULABLE] = was
    snap = snapshot([node(state=S.UNCORDON_REQUIRED, since=0, unschedulable=unschedulable, annotations=annotations)])
    plan, actions = run_step(snap, now=T0 + 70)
    assert plan.attempts == attempts
    assert transition(actions).target is S.DONE


@pytest.mark.parametrize(("was", "shown"), [(None, "missing"), ("yes", "'yes', not true or false")])
def test_a_cordon_no_record_says_is_ours_stays_and_blocks(was: str | None, shown: str) -> None:
    """A lost record must not lift an admin's cordon: the node stays cordoned, and says why."""
    annotations = {**UPGRADE_ANNOTATIONS, **({WAS_UNSCHEDULABLE: was} if was is not None else {})}
    snap = snapshot([node(state=S.UNCORDON_REQUIRED, since=0, unschedulable=True, annotations=annotations)])
    plan, actions = run_step(snap, now=T0 + 70)
    assert plan.attempts == []
    assert actions == blocked(
        "cordon-record",
        f"no record says upgrader cordoned the node ({WAS_UNSCHEDULABLE} is {shown}), so it stays cordoned: "
        f"uncordon it yourself if upgrader cordoned it, or annotate {WAS_UNSCHEDULABLE}=false",
        at(70),
        S.UNCORDON_REQUIRED,
        "cordon-record-missing",
    )


def test_reaching_done_clears_the_per_upgrade_and_requested_annotations() -> None:
    held = {
        **UPGRADE_ANNOTATIONS,
        WAS_UNSCHEDULABLE: "false",
        FAILED_KIND: "image",
        BLOCKED_KIND: "pdb",
        BLOCKED_REASON: "x",
        BLOCKED_SINCE: at(5),
    }
    snap = snapshot([node(state=S.UNCORDON_REQUIRED, since=0, unschedulable=True, annotations=held)])
    _, actions = run_step(snap, now=T0 + 70)
    assert actions == [
        Transition(
            "n1",
            S.UNCORDON_REQUIRED,
            S.DONE,
            {STATE_SINCE: at(70), **{k: None for k in PER_UPGRADE}, REQUESTED_ANNOTATION: None},
            "uncordon-required -> upgrade-done",
        )
    ]


def test_per_upgrade_annotations_are_upgraders_own() -> None:
    assert all(k.startswith("gpu-upgrader.io/") for k in PER_UPGRADE)
    assert STATE_SINCE not in PER_UPGRADE


def test_every_in_progress_state_has_a_step() -> None:
    from upgrader.core.model.states import IN_PROGRESS
    from upgrader.core.node.steps import STEPS

    assert set(STEPS) == set(IN_PROGRESS)


def test_default_policy_is_used_when_none_given() -> None:
    assert step(snapshot([node(state=S.CORDON_REQUIRED)]))[0].policy == Policy()
