"""The two budgets of starts, maxParallelUpgrades and maxUnavailable: fixed cases, what counts as
unavailable, and a property that plan_starts never exceeds them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upgrader.core.model.states import IN_PROGRESS, State
from upgrader.core.model.views import NodeView
from upgrader.core.rollout.schedule import NO_DOMAIN, Checks, Nodes, Standing, is_unavailable, plan_starts

from .factories import T0, node, policy
from .schedule_fixtures import DONE, FAILED, REQ, S, fleet, starts

# ----- budgets -----------------------------------------------------------------------------------------


def _eight(**extra: Any) -> list[NodeView]:
    return [node(f"n{i}", REQ, zone="a", **extra) for i in range(1, 9)]


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ({}, ["n1"]),  # the Operator's defaults: one at a time
        ({"maxParallelUpgrades": 2}, ["n1", "n2"]),
        ({"maxParallelUpgrades": 5}, ["n1", "n2"]),  # 25% of 8
        ({"maxParallelUpgrades": 5, "maxUnavailable": "50%"}, ["n1", "n2", "n3", "n4"]),
        ({"maxParallelUpgrades": 0, "maxUnavailable": 3}, ["n1", "n2", "n3"]),  # 0: no parallel limit
        ({"maxParallelUpgrades": 0, "maxUnavailable": "100%"}, [f"n{i}" for i in range(1, 9)]),
        ({"maxParallelUpgrades": 3, "maxUnavailable": "100%"}, ["n1", "n2", "n3"]),
    ],
)
def test_budgets_on_a_fresh_domain(knobs: dict[str, Any], expected: list[str]) -> None:
    assert starts(_eight(), policy(**knobs)) == expected


def test_candidates_go_by_name() -> None:
    nodes = fleet(("gpu-b", "a", REQ), ("gpu-c", "a", REQ), ("gpu-a", "a", REQ))
    assert starts(nodes, policy(maxParallelUpgrades=2, maxUnavailable=2)) == ["gpu-a", "gpu-b"]


def test_max_parallel_reached() -> None:
    nodes = fleet(("n1", "a", S.VALIDATION_REQUIRED), ("n2", "a", REQ), ("n3", "a", REQ))
    schedule = plan_starts(Nodes(nodes), policy(maxUnavailable="100%"), T0, True)
    assert schedule.starts == []
    assert schedule.waiting == "maxParallelUpgrades 1 reached: n1 (in progress)"
    assert (schedule.in_progress, schedule.unavailable, schedule.max_unavailable) == (1, 1, 3)


def test_max_unavailable_reached_counts_not_ready_and_failed_nodes() -> None:
    nodes = fleet(
        ("n1", "a", DONE, {"ready": False}),
        ("n2", "b", FAILED),
        ("n3", "a", REQ),
        ("n4", "a", REQ),
        ("n5", "a", DONE),
        ("n6", "a", DONE),
    )
    schedule = plan_starts(Nodes(nodes), policy(maxParallelUpgrades=0, maxUnavailable=2), T0, True, Standing({"n2"}))
    assert schedule.starts == []
    assert schedule.waiting == (
        "maxUnavailable 2 reached: n1 (NotReady), n2 (upgrade-failed); bring n1 back to Ready and recover n2, "
        "or raise maxUnavailable; see runbooks/rollout-halted.md"
    )


def test_already_cordoned_nodes_go_first_and_cost_no_budget() -> None:
    nodes = fleet(
        ("n1", "a", REQ), ("n2", "a", REQ), ("n3", "a", REQ, {"unschedulable": True}), ("n4", "a", REQ)
    )
    # maxUnavailable 1 is spent by n3 (cordoned by someone else): only n3 may start, and first.
    schedule = plan_starts(Nodes(nodes), policy(maxParallelUpgrades=0, maxUnavailable=1), T0, True)
    assert schedule.starts == ["n3"]
    assert (schedule.in_progress, schedule.unavailable) == (1, 1)
    # With room for one more, n3 still goes first and n1 uses the one unit of budget.
    assert starts(nodes, policy(maxParallelUpgrades=0, maxUnavailable=2)) == ["n3", "n1"]
    # maxParallelUpgrades still holds for them.
    assert starts(nodes, policy(maxParallelUpgrades=1, maxUnavailable=4)) == ["n3"]


def test_not_ready_nodes_also_start_without_budget() -> None:
    nodes = fleet(("n1", "a", REQ), ("n2", "a", REQ, {"ready": False}))
    assert starts(nodes, policy(maxParallelUpgrades=0, maxUnavailable=1)) == ["n2"]


def test_cordoned_nodes_start_even_when_the_fleet_is_over_budget() -> None:
    # Two nodes cordoned by someone else already exceed maxUnavailable 1; starting them makes
    # nothing less available (the Operator progresses manually cordoned nodes the same way).
    nodes = fleet(
        ("n1", "a", REQ),
        ("n2", "a", REQ, {"unschedulable": True}),
        ("n3", "a", REQ),
        ("n4", "a", REQ, {"unschedulable": True}),
    )
    schedule = plan_starts(Nodes(nodes), policy(maxParallelUpgrades=0, maxUnavailable=1), T0, True)
    assert schedule.starts == ["n2", "n4"]
    assert (schedule.in_progress, schedule.unavailable) == (2, 2)


@pytest.mark.parametrize(
    ("view", "unavailable"),
    [
        (node("n", DONE), False),
        (node("n", REQ), False),
        (node("n", DONE, unschedulable=True), True),
        (node("n", DONE, ready=False), True),
        (node("n", FAILED), True),
        *[(node("n", s), True) for s in sorted(IN_PROGRESS)],
    ],
)
def test_what_counts_as_unavailable(view: NodeView, unavailable: bool) -> None:
    assert is_unavailable(view) is unavailable


# ----- properties ----------------------------------------------------------------------------------------

_node_specs = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", None]),
        st.sampled_from(list(State)),
        st.booleans(),  # unschedulable
        st.booleans(),  # ready
    ),
    min_size=0,
    max_size=25,
)


def _domain(n: NodeView) -> str:
    return n.labels.get("topology.kubernetes.io/zone") or NO_DOMAIN


@settings(max_examples=300, deadline=None)
@given(
    _node_specs,
    st.integers(0, 6),
    st.one_of(st.integers(1, 10), st.integers(1, 100).map(lambda p: f"{p}%")),
    st.booleans(),
    st.sampled_from(["halt", "continue"]),
    st.sets(st.sampled_from([f"n{i:02}" for i in range(25)]), max_size=5),
)
def test_plan_starts_never_exceeds_the_budgets(
    specs: list[tuple[str | None, State, bool, bool]],
    parallel: int,
    max_unavailable: int | str,
    may_start: bool,
    on_failure: str,
    acknowledged: set[str],
) -> None:
    nodes = [
        node(f"n{i:02}", state, zone=zone, unschedulable=cordoned, ready=ready)
        for i, (zone, state, cordoned, ready) in enumerate(specs)
    ]
    pol = policy(maxParallelUpgrades=parallel, maxUnavailable=max_unavailable, onNodeFailure=on_failure)
    schedule = plan_starts(Nodes(nodes), pol, T0, may_start, Standing(acknowledged))
    by_name = {n.name: n for n in nodes}
    in_progress = sum(1 for n in nodes if n.state in IN_PROGRESS)
    unavailable = sum(1 for n in nodes if is_unavailable(n))
    newly_unavailable = [s for s in schedule.starts if not is_unavailable(by_name[s])]

    assert len(set(schedule.starts)) == len(schedule.starts)
    assert all(by_name[s].state is REQ for s in schedule.starts)
    if not may_start:
        assert schedule.starts == []
    if parallel:
        assert len(schedule.starts) <= max(0, parallel - in_progress)
    assert len(newly_unavailable) <= max(0, pol.max_unavailable_nodes(len(nodes)) - unavailable)
    assert schedule.in_progress == in_progress + len(schedule.starts)
    assert schedule.unavailable == unavailable + len(newly_unavailable)
    # Only the current domain starts, never beside nodes in progress of another domain, and every
    # domain before it is finished: done, or failed and acknowledged, or failed outside the canary
    # domain under onNodeFailure: continue.
    assert {_domain(by_name[s]) for s in schedule.starts} <= {schedule.current_domain}
    if schedule.starts:
        assert {_domain(n) for n in nodes if n.state in IN_PROGRESS} <= {schedule.current_domain}
    current = schedule.domains.index(schedule.current_domain) if schedule.current_domain else len(schedule.domains)
    canary = schedule.domains[0] if schedule.domains else None
    for n in nodes:
        if _domain(n) in schedule.domains[:current]:
            left_behind = on_failure == "continue" and _domain(n) != canary
            assert n.state is DONE or (n.state is FAILED and (n.name in acknowledged or left_behind))
    # An already-unavailable candidate is never passed over for one that costs budget.
    candidates = [n for n in nodes if n.state is REQ and _domain(n) == schedule.current_domain]
    if newly_unavailable:
        assert all(c.name in schedule.starts for c in candidates if is_unavailable(c))


def test_past_the_candidates_a_pass_holds_for_their_budgets_none_starts_unjudged() -> None:
    from upgrader.core.rollout.schedule import PDB_SCAN

    nodes = [node(f"n{i:03d}", zone="a") for i in range(PDB_SCAN + 5)]
    free = nodes[-1].name  # the one candidate no budget holds, past the scan
    judged: list[str] = []

    def behind(name: str, starting: object) -> str | None:
        judged.append(name)
        return None if name == free else "PodDisruptionBudget ns/web allows 0 disruption(s)"

    pol = policy(maxParallelUpgrades=0, maxUnavailable="100%")
    schedule = plan_starts(Nodes(nodes), pol, T0, True, checks=Checks(pdbs=behind))
    assert schedule.starts == [] and len(judged) == PDB_SCAN
    assert schedule.wait is not None and schedule.wait.reason == "pdb-capacity"
