"""The per-node state machine: the ten GPU Operator label values and nothing off the table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transitions import MachineError

from upgrader.core.actions import Transition
from upgrader.core.machine import TRANSITIONS, TRIGGERS, allowed_triggers, fire
from upgrader.core.states import IN_PROGRESS, ORDER, State

S = State

# The whole graph, written out by hand: (source, trigger, drain enabled) -> target.
TABLE: dict[tuple[State, str, bool], State] = {
    (S.DONE, "require", False): S.UPGRADE_REQUIRED,
    (S.UPGRADE_REQUIRED, "up_to_date", False): S.DONE,
    (S.UPGRADE_REQUIRED, "start", False): S.CORDON_REQUIRED,
    (S.CORDON_REQUIRED, "cordoned", False): S.WAIT_FOR_JOBS_REQUIRED,
    (S.WAIT_FOR_JOBS_REQUIRED, "jobs_finished", False): S.POD_DELETION_REQUIRED,
    (S.POD_DELETION_REQUIRED, "gpu_pods_gone", False): S.POD_RESTART_REQUIRED,
    (S.POD_DELETION_REQUIRED, "gpu_pods_gone", True): S.DRAIN_REQUIRED,
    (S.DRAIN_REQUIRED, "drained", False): S.POD_RESTART_REQUIRED,
    (S.POD_RESTART_REQUIRED, "driver_restarted", False): S.VALIDATION_REQUIRED,
    (S.VALIDATION_REQUIRED, "validated", False): S.UNCORDON_REQUIRED,
    (S.VALIDATION_REQUIRED, "driver_superseded", False): S.POD_RESTART_REQUIRED,
    (S.UNCORDON_REQUIRED, "uncordoned", False): S.DONE,
    **{(s, "fail", False): S.FAILED for s in IN_PROGRESS},
}
# Unguarded transitions go the same way whatever the drain setting.
EXPECTED = {
    **{(s, t, True): d for (s, t, _), d in TABLE.items() if t != "gpu_pods_gone"},
    **TABLE,
}
# Triggers a Machine with auto transitions would add, and some that were never there.
NOT_TRIGGERS = [
    "to_upgrade_done",
    "to_upgrade_failed",
    "to_DONE",
    "to_UPGRADE_REQUIRED",
    "retry",
    "",
    "reset",
]
ALL_TRIGGERS = sorted(TRIGGERS) + NOT_TRIGGERS


def test_state_values_are_exactly_the_ten_label_values() -> None:
    assert [s.value for s in State] == [
        "upgrade-required",
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "drain-required",
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
        "upgrade-done",
        "upgrade-failed",
    ]
    assert tuple(State) == ORDER


def test_in_progress_is_cordon_through_uncordon() -> None:
    assert {s.value for s in IN_PROGRESS} == {
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "drain-required",
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, None), ("", None), ("upgrade-done", S.DONE), ("pod-restart-required", S.POD_RESTART_REQUIRED)],
)
def test_parse_reads_label_values(text: str | None, expected: State | None) -> None:
    assert State.parse(text) is expected


@pytest.mark.parametrize("text", ["done", "UPGRADE-DONE", "upgrade_done", " upgrade-done", "DONE"])
def test_parse_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="unknown upgrade state"):
        State.parse(text)


def test_the_machine_table_is_the_documented_graph() -> None:
    declared = set()
    for t in TRANSITIONS:
        sources = t["source"] if isinstance(t["source"], list) else [t["source"]]
        declared |= {(State(s), t["trigger"], State(t["dest"])) for s in sources}
    assert declared == {(s, t, d) for (s, t, _), d in TABLE.items()}


@pytest.mark.parametrize(("source", "trigger", "drain", "target"), [(*k, v) for k, v in EXPECTED.items()])
def test_fire_follows_the_table(source: State, trigger: str, drain: bool, target: State) -> None:
    result = fire("n1", source, trigger, drain_enabled=drain)
    assert result == Transition("n1", source, target, {}, "")


OFF_TABLE = [
    (s, t, drain)
    for s in State
    for t in ALL_TRIGGERS
    for drain in (False, True)
    if (s, t, drain) not in EXPECTED
]


@pytest.mark.parametrize(("source", "trigger", "drain"), OFF_TABLE)
def test_every_pair_off_the_table_raises_machine_error(source: State, trigger: str, drain: bool) -> None:
    with pytest.raises(MachineError):
        fire("n1", source, trigger, drain_enabled=drain)


def test_there_are_no_auto_transitions() -> None:
    assert not any(t.startswith("to_") for t in TRIGGERS)
    with pytest.raises(MachineError):
        fire("n1", S.UPGRADE_REQUIRED, "to_upgrade_done")


def test_a_failed_node_has_no_way_out_through_the_machine() -> None:
    assert allowed_triggers(S.FAILED) == []


@pytest.mark.parametrize(("drain", "target"), [(False, S.POD_RESTART_REQUIRED), (True, S.DRAIN_REQUIRED)])
def test_gpu_pods_gone_goes_to_drain_only_when_drain_is_enabled(drain: bool, target: State) -> None:
    assert fire("n1", S.POD_DELETION_REQUIRED, "gpu_pods_gone", drain_enabled=drain).target is target


def test_fire_returns_a_transition_carrying_annotations_and_message() -> None:
    result = fire(
        "gpu-7",
        S.VALIDATION_REQUIRED,
        "fail",
        annotations={"gpu-upgrader.io/failed-kind": "validation", "gpu-upgrader.io/blocked-kind": None},
        message="validator not Ready",
    )
    assert result == Transition(
        node="gpu-7",
        source=S.VALIDATION_REQUIRED,
        target=S.FAILED,
        annotations={"gpu-upgrader.io/failed-kind": "validation", "gpu-upgrader.io/blocked-kind": None},
        message="validator not Ready",
    )


def test_fire_copies_the_annotations() -> None:
    given_annotations: dict[str, str | None] = {"k": "v"}
    result = fire("n1", S.DONE, "require", annotations=given_annotations)
    given_annotations["k"] = "changed"
    assert result.annotations == {"k": "v"}


def test_a_refused_fire_leaves_the_shared_machine_usable() -> None:
    with pytest.raises(MachineError):
        fire("n1", S.DONE, "start")
    assert fire("n1", S.UPGRADE_REQUIRED, "start").target is S.CORDON_REQUIRED


@given(
    st.sampled_from(list(State)),
    st.one_of(st.sampled_from(ALL_TRIGGERS), st.text(max_size=12)),
    st.booleans(),
)
def test_fire_never_leaves_the_transition_table(source: State, trigger: str, drain: bool) -> None:
    try:
        result = fire("n1", source, trigger, drain_enabled=drain)
    except MachineError:
        assert (source, trigger, drain) not in EXPECTED
    else:
        assert EXPECTED[(source, trigger, drain)] is result.target
        assert result.source is source


@given(st.lists(st.sampled_from(ALL_TRIGGERS), max_size=30), st.booleans())
def test_any_walk_from_done_only_visits_states_along_the_table(triggers: list[str], drain: bool) -> None:
    state = S.DONE
    for trigger in triggers:
        allowed = allowed_triggers(state)
        try:
            result = fire("n1", state, trigger, drain_enabled=drain)
        except MachineError:
            assert (state, trigger, drain) not in EXPECTED
            continue
        assert trigger in allowed
        assert (result.source, trigger, drain) in EXPECTED
        state = result.target
