"""Which nodes start: failure domains in order (canary first), soak, and the two budgets."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upgrader.core.policy import Policy
from upgrader.core.schedule import NO_DOMAIN, canary_domain, domain_order, is_unavailable, plan_starts
from upgrader.core.states import IN_PROGRESS, State
from upgrader.core.views import NodeView

from .factories import T0, at, node, policy

S = State
REQ, DONE, FAILED = S.UPGRADE_REQUIRED, S.DONE, S.FAILED


def fleet(*specs: tuple[Any, ...]) -> list[NodeView]:
    """Nodes from (name, zone, state) or (name, zone, state, {node() keywords})."""
    return [
        node(name, state, zone=zone, **(extra[0] if extra else {})) for name, zone, state, *extra in specs
    ]


def starts(
    nodes: list[NodeView],
    pol: Policy | None = None,
    now: float = T0,
    may_start: bool = True,
    acknowledged: set[str] | None = None,
) -> list[str]:
    return plan_starts(nodes, pol or Policy(), now, may_start, acknowledged or set()).starts


# ----- domain order -----------------------------------------------------------------------------------

ZONES = fleet(("n1", "c", REQ), ("n2", "a", REQ), ("n3", None, REQ), ("n4", "b", REQ), ("n5", "d", REQ))


@pytest.mark.parametrize(
    ("failure_domains", "expected"),
    [
        ({}, ["a", "b", "c", "d", NO_DOMAIN]),
        ({"order": ["c"]}, ["c", "a", "b", "d", NO_DOMAIN]),
        ({"order": ["d", "b"]}, ["d", "b", "a", "c", NO_DOMAIN]),
        ({"order": ["x", "c"]}, ["c", "a", "b", "d", NO_DOMAIN]),  # a listed domain with no node: skipped
        ({"canary": "b"}, ["b", "a", "c", "d", NO_DOMAIN]),
        ({"canary": "b", "order": ["c", "b"]}, ["b", "c", "a", "d", NO_DOMAIN]),  # canary first, then order
        ({"canary": "x", "order": ["d"]}, ["d", "a", "b", "c", NO_DOMAIN]),  # an absent canary is ignored
    ],
)
def test_domain_order(failure_domains: dict[str, Any], expected: list[str]) -> None:
    pol = policy(failureDomains=failure_domains)
    assert domain_order(ZONES, pol) == expected
    assert canary_domain(ZONES, pol) == expected[0]


def test_domain_label_key_is_the_policys() -> None:
    nodes = [node("n1", REQ, labels={"example.com/rack": "r9"}), node("n2", REQ, zone="a")]
    assert domain_order(nodes, policy(failureDomains={"labelKey": "example.com/rack"})) == ["r9", NO_DOMAIN]


def test_only_unlabelled_nodes_form_one_domain() -> None:
    nodes = fleet(("n1", None, REQ), ("n2", None, REQ))
    assert domain_order(nodes, Policy()) == [NO_DOMAIN]
    assert starts(nodes) == ["n1"]


def test_no_nodes() -> None:
    schedule = plan_starts([], Policy(), T0, True, set())
    assert (schedule.starts, schedule.current_domain, schedule.domains) == ([], None, [])
    assert canary_domain([], Policy()) is None


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
    schedule = plan_starts(nodes, policy(maxUnavailable="100%"), T0, True, set())
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
    schedule = plan_starts(nodes, policy(maxParallelUpgrades=0, maxUnavailable=2), T0, True, {"n2"})
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
    schedule = plan_starts(nodes, policy(maxParallelUpgrades=0, maxUnavailable=1), T0, True, set())
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
    schedule = plan_starts(nodes, policy(maxParallelUpgrades=0, maxUnavailable=1), T0, True, set())
    assert schedule.starts == ["n2", "n4"]
    assert (schedule.in_progress, schedule.unavailable) == (2, 2)


def test_a_node_in_progress_in_another_domain_finishes_before_anything_starts() -> None:
    """b's node is in progress (the order changed, a zone was relabelled, a replica had another
    order) while the rollout is on a: nothing starts until it is done, then a goes on."""
    nodes = fleet(("n1", "b", S.CORDON_REQUIRED), ("n2", "a", REQ), ("n3", "a", REQ), ("n4", "b", REQ))
    schedule = plan_starts(nodes, policy(maxParallelUpgrades=0, maxUnavailable="100%"), T0, True, set())
    assert (schedule.starts, schedule.current_domain) == ([], "a")
    assert schedule.waiting == (
        "nodes of domain b are in progress while the rollout is on domain a (the order, a zone label or "
        "the fleet changed mid-rollout): no node starts until they finish; in progress: n1"
    )
    done = fleet(("n1", "b", DONE), ("n2", "a", REQ), ("n3", "a", REQ), ("n4", "b", REQ))
    assert plan_starts(done, policy(maxParallelUpgrades=0, maxUnavailable="100%"), T0, True, set()).starts == [
        "n2",
        "n3",
    ]


def test_the_domain_the_rollout_is_on_keeps_starting_beside_its_own_nodes_in_progress() -> None:
    nodes = fleet(("n1", "b", S.CORDON_REQUIRED), ("n2", "a", DONE), ("n4", "b", REQ))
    schedule = plan_starts(nodes, policy(maxParallelUpgrades=2, maxUnavailable=2), T0, True, set())
    assert (schedule.starts, schedule.current_domain) == (["n4"], "b")


def test_the_rollout_stays_on_its_domain_until_it_is_finished() -> None:
    """The last status said b: b goes on though the policy now puts c first."""
    nodes = fleet(("b1", "b", DONE), ("b2", "b", REQ), ("c1", "c", REQ))
    pol = policy(failureDomains={"order": ["c", "b"]})
    schedule = plan_starts(nodes, pol, T0, True, set(), last_domain="b")
    assert (schedule.starts, schedule.current_domain) == (["b2"], "b")


def test_a_node_of_a_finished_domain_needing_the_upgrade_again_waits_for_the_orders_next_turn() -> None:
    """a finished, b is the current domain (between two of its nodes): a re-requested a-node waits
    until b is done; then the order is read again from the canary, so a goes before c."""
    pol = policy(maxParallelUpgrades=1)
    nodes = fleet(("a1", "a", REQ), ("b1", "b", DONE), ("b2", "b", REQ), ("c1", "c", REQ))
    assert plan_starts(nodes, pol, T0, True, set(), last_domain="b").starts == ["b2"]
    nodes = fleet(("a1", "a", REQ), ("b1", "b", DONE), ("b2", "b", DONE), ("c1", "c", REQ))
    schedule = plan_starts(nodes, pol, T0, True, set(), last_domain="b")
    assert (schedule.starts, schedule.current_domain) == (["a1"], "a")


def test_the_soak_counts_from_the_domain_the_rollout_left() -> None:
    nodes = fleet(("a1", "a", REQ), ("b1", "b", DONE, {"since": -30}), ("c1", "c", REQ))
    pol = policy(failureDomains={"soakSeconds": 60})
    schedule = plan_starts(nodes, pol, T0, True, set(), last_domain="b")
    assert (schedule.starts, schedule.waiting) == (
        [],
        f"soaking domain b for 30s more (failureDomains.soakSeconds 60, until {at(30)}); then domain a starts",
    )


def test_a_last_domain_that_is_gone_starts_from_the_order() -> None:
    nodes = fleet(("a1", "a", REQ), ("b1", "b", REQ))
    assert plan_starts(nodes, Policy(), T0, True, set(), last_domain="zone-that-was").starts == ["a1"]


# ----- domains, soak, pause ------------------------------------------------------------------------


def test_the_next_domain_waits_until_the_current_is_finished() -> None:
    nodes = fleet(("a1", "a", DONE), ("a2", "a", S.UNCORDON_REQUIRED), ("b1", "b", REQ), ("b2", "b", REQ))
    schedule = plan_starts(nodes, policy(maxParallelUpgrades=0, maxUnavailable="100%"), T0, True, set())
    assert (schedule.starts, schedule.current_domain) == ([], "a")
    assert schedule.waiting == "domain b waits for the canary domain a to finish: a2 (in progress)"


def test_the_canary_domain_goes_first() -> None:
    nodes = fleet(("a1", "a", REQ), ("b1", "b", REQ), ("c1", "c", REQ))
    schedule = plan_starts(nodes, policy(failureDomains={"canary": "c"}), T0, True, set())
    assert (schedule.starts, schedule.current_domain, schedule.domains) == (["c1"], "c", ["c", "a", "b"])


def test_nodes_without_the_domain_label_go_last() -> None:
    nodes = fleet(("x1", None, REQ), ("a1", "a", DONE), ("b1", "b", REQ))
    assert starts(nodes) == ["b1"]
    nodes = fleet(("x1", None, REQ), ("a1", "a", DONE), ("b1", "b", DONE))
    assert starts(nodes) == ["x1"]


SOAK = policy(failureDomains={"soakSeconds": 600})


def _soaking() -> list[NodeView]:
    return fleet(
        ("a1", "a", DONE, {"since": 100}),
        ("a2", "a", DONE, {"since": 250}),  # the last of domain a finished at T0+250
        ("b1", "b", REQ, {"since": 0}),
    )


@pytest.mark.parametrize(
    ("now", "expected", "waiting"),
    [
        (T0 + 250, [], f"soaking domain a for 600s more (failureDomains.soakSeconds 600, until {at(850)})"),
        (T0 + 400, [], f"soaking domain a for 450s more (failureDomains.soakSeconds 600, until {at(850)})"),
        (T0 + 849, [], f"soaking domain a for 1s more (failureDomains.soakSeconds 600, until {at(850)})"),
        # never "0s more" while still soaking
        (T0 + 849.5, [], f"soaking domain a for 1s more (failureDomains.soakSeconds 600, until {at(850)})"),
        (T0 + 850, ["b1"], None),
        (T0 + 5000, ["b1"], None),
    ],
)
def test_the_next_domain_starts_soak_seconds_after_the_last_node_finished(
    now: float, expected: list[str], waiting: str | None
) -> None:
    schedule = plan_starts(_soaking(), SOAK, now, True, set())
    then = f"{waiting}; then domain b starts" if waiting else None
    assert (schedule.starts, schedule.current_domain, schedule.waiting) == (expected, "b", then)


def test_soak_does_not_stop_a_domain_already_under_way() -> None:
    nodes = [*_soaking(), node("b2", S.POD_RESTART_REQUIRED, zone="b")]
    schedule = plan_starts(
        nodes,
        policy(maxParallelUpgrades=2, maxUnavailable="100%", failureDomains={"soakSeconds": 600}),
        T0 + 300,
        True,
        set(),
    )
    assert (schedule.starts, schedule.waiting) == (["b1"], None)


def test_the_first_domain_does_not_soak() -> None:
    nodes = fleet(("a1", "a", REQ, {"since": 0}))
    assert starts(nodes, SOAK, now=T0) == ["a1"]


def test_may_start_false_starts_nothing() -> None:
    nodes = fleet(("a1", "a", REQ), ("a2", "a", REQ))
    schedule = plan_starts(nodes, Policy(), T0, False, set())
    assert (schedule.starts, schedule.current_domain, schedule.waiting) == ([], "a", None)
    assert (schedule.in_progress, schedule.unavailable) == (0, 0)


def test_acknowledged_failures_let_a_domain_finish() -> None:
    nodes = fleet(("a1", "a", DONE), ("a2", "a", FAILED), ("b1", "b", REQ))
    held = plan_starts(nodes, policy(maxUnavailable=2), T0, True, set())
    assert (held.starts, held.current_domain) == ([], "a")
    moved = plan_starts(nodes, policy(maxUnavailable=2), T0, True, {"a2"})
    assert (moved.starts, moved.current_domain) == (["b1"], "b")


@pytest.mark.parametrize(
    ("failed_in", "acknowledged", "current", "started"),
    [
        ("b", set(), "c", ["c1"]),  # the rollout goes on without the failed node
        ("a", set(), "a", []),  # the canary's failures always wait for `upgrader resume`
        ("a", {"a2"}, "b", ["b1"]),
    ],
)
def test_under_on_node_failure_continue_a_failed_node_is_left_behind(
    failed_in: str, acknowledged: set[str], current: str, started: list[str]
) -> None:
    nodes = fleet(
        ("a1", "a", DONE),
        ("a2", "a", FAILED if failed_in == "a" else DONE),
        ("b1", "b", FAILED if failed_in == "b" else REQ),
        ("b2", "b", DONE),
        ("c1", "c", REQ),
    )
    schedule = plan_starts(nodes, policy(maxUnavailable=2, onNodeFailure="continue"), T0, True, acknowledged)
    assert (schedule.starts, schedule.current_domain) == (started, current)


def test_under_on_node_failure_halt_a_failed_node_holds_its_domain() -> None:
    nodes = fleet(("a1", "a", DONE), ("b1", "b", FAILED), ("b2", "b", DONE), ("c1", "c", REQ))
    schedule = plan_starts(nodes, policy(maxUnavailable=2), T0, True, set())
    assert (schedule.starts, schedule.current_domain) == ([], "b")


def test_a_failed_node_still_costs_budget_when_acknowledged() -> None:
    # It stays cordoned, so it is unavailable: with maxUnavailable 1 nothing else may start.
    nodes = fleet(("a1", "a", FAILED), ("b1", "b", REQ))
    schedule = plan_starts(nodes, policy(maxUnavailable=1), T0, True, {"a1"})
    assert (schedule.starts, schedule.current_domain) == ([], "b")
    assert schedule.waiting == (
        "maxUnavailable 1 reached: a1 (upgrade-failed); recover it or raise maxUnavailable; "
        "see runbooks/rollout-halted.md"
    )


def test_everything_finished() -> None:
    nodes = fleet(("a1", "a", DONE), ("b1", "b", DONE))
    schedule = plan_starts(nodes, Policy(), T0, True, set())
    assert (schedule.starts, schedule.current_domain, schedule.waiting) == ([], None, None)


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
    schedule = plan_starts(nodes, pol, T0, may_start, acknowledged)
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
