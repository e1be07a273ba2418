"""The per-node state machine: the ten GPU Operator label values and nothing off the table."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transitions import MachineError

from upgrader.core.model.actions import Transition
from upgrader.core.model.states import IN_PROGRESS, ORDER, State
from upgrader.core.node.machine import FLAGS, TRANSITIONS, TRIGGERS, allowed_triggers, fire

S = State

# The whole graph, written out by hand: (source, trigger, guard) -> target. A guard is None (always),
# "+flag" (only with the flag) or "-flag" (only without it).
GRAPH: list[tuple[State, str, str | None, State]] = [
    (S.DONE, "require", None, S.UPGRADE_REQUIRED),
    (S.UPGRADE_REQUIRED, "up_to_date", None, S.DONE),
    (S.UPGRADE_REQUIRED, "start", None, S.CORDON_REQUIRED),
    (S.CORDON_REQUIRED, "cordoned", "-restart_only", S.WAIT_FOR_JOBS_REQUIRED),
    (S.CORDON_REQUIRED, "cordoned", "+restart_only", S.POD_RESTART_REQUIRED),
    (S.WAIT_FOR_JOBS_REQUIRED, "jobs_finished", None, S.POD_DELETION_REQUIRED),
    (S.POD_DELETION_REQUIRED, "gpu_pods_gone", "-drain_every_node", S.POD_RESTART_REQUIRED),
    (S.POD_DELETION_REQUIRED, "gpu_pods_gone", "+drain_every_node", S.DRAIN_REQUIRED),
    (S.POD_DELETION_REQUIRED, "deletion_failed", "+drain_enabled", S.DRAIN_REQUIRED),
    (S.DRAIN_REQUIRED, "drained", None, S.POD_RESTART_REQUIRED),
    (S.POD_RESTART_REQUIRED, "config_changed", None, S.WAIT_FOR_JOBS_REQUIRED),
    (S.POD_RESTART_REQUIRED, "driver_restarted", None, S.VALIDATION_REQUIRED),
    (S.VALIDATION_REQUIRED, "validated", None, S.UNCORDON_REQUIRED),
    (S.VALIDATION_REQUIRED, "driver_superseded", None, S.POD_RESTART_REQUIRED),
    (S.UNCORDON_REQUIRED, "uncordoned", None, S.DONE),
    (S.FAILED, "driver_recovered", None, S.VALIDATION_REQUIRED),
    (S.DONE, "unfinished", None, S.VALIDATION_REQUIRED),
    (S.CORDON_REQUIRED, "requeue", None, S.UPGRADE_REQUIRED),
    (S.WAIT_FOR_JOBS_REQUIRED, "requeue", None, S.UPGRADE_REQUIRED),
    *[(s, "fail", None, S.FAILED) for s in sorted(IN_PROGRESS)],  # sorted: the same ids in every process
]
FLAG_SETS = [frozenset(c) for n in range(len(FLAGS) + 1) for c in itertools.combinations(FLAGS, n)]


def _admits(guard: str | None, flags: frozenset[str]) -> bool:
    return guard is None or (guard[1:] in flags) == (guard[0] == "+")


EXPECTED: dict[tuple[State, str, frozenset[str]], State] = {
    (source, trigger, flags): target
    for source, trigger, guard, target in GRAPH
    for flags in FLAG_SETS
    if _admits(guard, flags)
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
        guard = f"+{t['conditions']}" if "conditions" in t else f"-{t['unless']}" if "unless" in t else None
        declared |= {(State(s), t["trigger"], guard, State(t["dest"])) for s in sources}
    assert declared == set(GRAPH)


@pytest.mark.parametrize(("source", "trigger", "flags", "target"), [(*k, v) for k, v in EXPECTED.items()])
def test_fire_follows_the_table(source: State, trigger: str, flags: frozenset[str], target: State) -> None:
    result = fire("n1", source, trigger, flags)
    assert result == Transition("n1", source, target, {}, "")


OFF_TABLE = [
    (s, t, flags)
    for s in State
    for t in ALL_TRIGGERS
    for flags in FLAG_SETS
    if (s, t, flags) not in EXPECTED
]


@pytest.mark.parametrize(("source", "trigger", "flags"), OFF_TABLE)
def test_every_pair_off_the_table_raises_machine_error(source: State, trigger: str, flags: frozenset[str]) -> None:
    with pytest.raises(MachineError):
        fire("n1", source, trigger, flags)


def test_an_unknown_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown machine flags"):
        fire("n1", S.CORDON_REQUIRED, "cordoned", {"restart-only"})


def test_there_are_no_auto_transitions() -> None:
    assert not any(t.startswith("to_") for t in TRIGGERS)
    with pytest.raises(MachineError):
        fire("n1", S.UPGRADE_REQUIRED, "to_upgrade_done")


def test_a_failed_node_leaves_only_when_its_driver_recovered() -> None:
    assert allowed_triggers(S.FAILED) == ["driver_recovered"]
    assert fire("n1", S.FAILED, "driver_recovered").target is S.VALIDATION_REQUIRED


@pytest.mark.parametrize(
    ("flags", "target"),
    [
        (set(), S.POD_RESTART_REQUIRED),
        ({"drain_enabled"}, S.POD_RESTART_REQUIRED),  # drain is the fallback, as in the GPU Operator
        ({"drain_enabled", "drain_every_node"}, S.DRAIN_REQUIRED),
    ],
)
def test_gpu_pods_gone_drains_only_when_every_node_is_drained(flags: set[str], target: State) -> None:
    assert fire("n1", S.POD_DELETION_REQUIRED, "gpu_pods_gone", flags).target is target


def test_a_deletion_that_cannot_finish_drains_only_with_drain_enabled() -> None:
    assert fire("n1", S.POD_DELETION_REQUIRED, "deletion_failed", {"drain_enabled"}).target is S.DRAIN_REQUIRED
    with pytest.raises(MachineError):
        fire("n1", S.POD_DELETION_REQUIRED, "deletion_failed")


@pytest.mark.parametrize(
    ("flags", "target"), [(set(), S.WAIT_FOR_JOBS_REQUIRED), ({"restart_only"}, S.POD_RESTART_REQUIRED)]
)
def test_a_restart_only_node_goes_from_cordon_straight_to_the_restart(flags: set[str], target: State) -> None:
    assert fire("n1", S.CORDON_REQUIRED, "cordoned", flags).target is target


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
    st.sampled_from(FLAG_SETS),
)
def test_fire_never_leaves_the_transition_table(source: State, trigger: str, flags: frozenset[str]) -> None:
    try:
        result = fire("n1", source, trigger, flags)
    except MachineError:
        assert (source, trigger, flags) not in EXPECTED
    else:
        assert EXPECTED[(source, trigger, flags)] is result.target
        assert result.source is source


@given(st.lists(st.sampled_from(ALL_TRIGGERS), max_size=30), st.sampled_from(FLAG_SETS))
def test_any_walk_from_done_only_visits_states_along_the_table(triggers: list[str], flags: frozenset[str]) -> None:
    state = S.DONE
    for trigger in triggers:
        allowed = allowed_triggers(state)
        try:
            result = fire("n1", state, trigger, flags)
        except MachineError:
            assert (state, trigger, flags) not in EXPECTED
            continue
        assert trigger in allowed
        assert (result.source, trigger, flags) in EXPECTED
        state = result.target
