"""GPU Operator parity: the Operator's node annotations, its initial-state record at start and uncordon,
and nodes it started that upgrader adopts with their timers."""

from __future__ import annotations

import pytest

from upgrader.core.model.actions import (
    Annotate,
    Event,
)
from upgrader.core.model.states import (
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OPERATOR_VALIDATION_START,
    OPERATOR_WAIT_START,
    SINCE_STATE,
    STARTED_AT,
    STATE_SINCE,
    TARGET_REVISION,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.rollout.detect import detect

from .factories import (
    NEW,
    OLD,
    T0,
    at,
    driver_pod,
    gpu_pod,
    node,
    policy,
    run_step,
    snapshot,
    transition,
)
from .operator_parity_fixtures import S, _start


def test_a_start_on_a_cordoned_node_writes_the_operators_record_too() -> None:
    started = _start(node(zone="a", unschedulable=True))
    assert started.annotations[WAS_UNSCHEDULABLE] == "true"
    assert started.annotations[OPERATOR_INITIAL_UNSCHEDULABLE] == "true"


def test_a_start_removes_an_operator_record_that_no_longer_holds() -> None:
    """The Operator recorded a cordon that someone lifted since: keeping the record would leave our own
    cordon in place at the end."""
    started = _start(node(zone="a", annotations={OPERATOR_INITIAL_UNSCHEDULABLE: "true"}))
    assert started.annotations[WAS_UNSCHEDULABLE] == "false"
    assert started.annotations[OPERATOR_INITIAL_UNSCHEDULABLE] is None


@pytest.mark.parametrize(
    ("annotations", "attempts"),
    [
        ({OPERATOR_INITIAL_UNSCHEDULABLE: "true"}, []),
        ({OPERATOR_INITIAL_UNSCHEDULABLE: ""}, []),  # the Operator reads presence
        ({WAS_UNSCHEDULABLE: "false"}, ["uncordon"]),
    ],
)
def test_uncordon_honours_the_operators_record(annotations: dict[str, str], attempts: list[str]) -> None:
    view = node(state=S.UNCORDON_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0), **annotations})
    plan, _ = run_step(snapshot([view], [driver_pod(revision=NEW)]), now=T0 + 1)
    assert ["uncordon" for a in plan.attempts] == attempts


def test_reaching_done_clears_the_operators_record() -> None:
    view = node(
        state=S.UNCORDON_REQUIRED,
        since=0,
        unschedulable=True,
        annotations={STARTED_AT: at(0), OPERATOR_INITIAL_UNSCHEDULABLE: "true"},
    )
    _, actions = run_step(snapshot([view], [driver_pod(revision=NEW)]), now=T0 + 1)
    assert transition(actions).annotations[OPERATOR_INITIAL_UNSCHEDULABLE] is None


@pytest.mark.parametrize(
    ("state", "annotations", "since"),
    [
        (S.WAIT_FOR_JOBS_REQUIRED, {OPERATOR_WAIT_START: str(int(T0) - 120)}, at(-120)),
        (S.VALIDATION_REQUIRED, {OPERATOR_VALIDATION_START: str(int(T0) - 30)}, at(-30)),
        (S.WAIT_FOR_JOBS_REQUIRED, {OPERATOR_WAIT_START: "yesterday"}, at(0)),  # unreadable: from now
        (S.WAIT_FOR_JOBS_REQUIRED, {OPERATOR_WAIT_START: "1764500000000"}, at(0)),  # milliseconds: ignored
        (S.WAIT_FOR_JOBS_REQUIRED, {OPERATOR_WAIT_START: "\u00b2"}, at(0)),  # a digit, not a decimal one
        (S.POD_RESTART_REQUIRED, {}, at(0)),
        # A state-since from an earlier life of the node (it was done, then the Operator started it).
        (S.VALIDATION_REQUIRED, {STATE_SINCE: at(-86_400), OPERATOR_VALIDATION_START: str(int(T0) - 20)}, at(-20)),
        (S.POD_DELETION_REQUIRED, {STATE_SINCE: at(-86_400)}, at(0)),
    ],
)
def test_a_node_the_operator_started_is_adopted_with_its_timers(
    state: State, annotations: dict[str, str], since: str
) -> None:
    # The runbook marks the Operator's own cordon (was-unschedulable=false) before the hand-over.
    view = node(state=state, unschedulable=True, annotations={**annotations, WAS_UNSCHEDULABLE: "false"})
    actions = detect(snapshot([view], [driver_pod(revision=OLD)]), policy(), T0)
    adopted = [a for a in actions if isinstance(a, Annotate)]
    assert adopted == [
        Annotate("n1", {STARTED_AT: at(0), STATE_SINCE: since, SINCE_STATE: state.value, WAS_UNSCHEDULABLE: "false",
                        TARGET_REVISION: NEW})
    ]
    (event,) = [a for a in actions if isinstance(a, Event)]
    assert event.message.startswith(f"adopted in {state.value} (started by another controller)")


def test_an_adopted_cordon_no_record_accounts_for_stays_on_and_says_so() -> None:
    """Cordoned, adopted, and neither the Operator's mark nor ours says whose cordon it is (an admin's,
    on a node someone set in progress by hand, as often as the Operator's): it is not lifted."""
    view = node(state=S.POD_RESTART_REQUIRED, unschedulable=True)
    (adopted, event) = detect(snapshot([view], [driver_pod(revision=OLD)]), policy(), T0)
    assert isinstance(adopted, Annotate) and adopted.annotations[WAS_UNSCHEDULABLE] is None
    assert isinstance(event, Event) and event.message.endswith(
        f"no record says who cordoned it: it stays cordoned at the end unless {WAS_UNSCHEDULABLE}=false is set "
        "(the GPU Operator's own cordon)"
    )


def test_an_adopted_node_the_operator_found_cordoned_stays_cordoned() -> None:
    view = node(state=S.POD_RESTART_REQUIRED, unschedulable=True, annotations={OPERATOR_INITIAL_UNSCHEDULABLE: "true"})
    (adopted, event) = detect(snapshot([view], [driver_pod(revision=OLD)]), policy(), T0)
    assert isinstance(adopted, Annotate) and adopted.annotations[WAS_UNSCHEDULABLE] == "true"
    assert isinstance(event, Event) and "it stays cordoned at the end" in event.message


def test_a_timer_taken_over_from_the_operator_times_the_wait_out() -> None:
    """Adopted 250 s into a 300 s wait for jobs: it times out 50 s later, not 300 s later."""
    marks = {OPERATOR_WAIT_START: str(int(T0)), WAS_UNSCHEDULABLE: "false"}
    view = node(state=S.WAIT_FOR_JOBS_REQUIRED, unschedulable=True, annotations=marks)
    jobs = [gpu_pod("train-0", owner="Job", labels={"app": "train"})]
    snap = snapshot([view], [driver_pod(revision=OLD), *jobs])
    (adopted, _) = detect(snap, policy(), T0 + 250)
    assert isinstance(adopted, Annotate)
    snap = snapshot([view.with_changes(None, adopted.annotations)], [driver_pod(revision=OLD), *jobs])
    pol = policy(waitForCompletion={"podSelector": "app=train", "timeoutSeconds": 300}, onBlockedTimeout="fail")
    _, actions = run_step(snap, pol=pol, now=T0 + 300)
    assert transition(actions).target is S.FAILED
    moved_on = node(state=S.WAIT_FOR_JOBS_REQUIRED, annotations={**adopted.annotations, OPERATOR_WAIT_START: "1"})
    _, actions = run_step(snapshot([moved_on], [driver_pod(revision=OLD)]), pol=pol, now=T0 + 1)
    assert transition(actions).annotations[OPERATOR_WAIT_START] is None  # honoured, then cleared


def test_nodes_upgrader_started_are_not_adopted() -> None:
    view = node(state=S.POD_RESTART_REQUIRED, unschedulable=True, annotations={STARTED_AT: at(-5)})
    assert detect(snapshot([view], [driver_pod(revision=OLD)]), policy(), T0) == []
