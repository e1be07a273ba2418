"""Which nodes start: failure domains in order (canary first), the domain the rollout is on, soak, pause and
failed nodes. The two budgets are in test_schedule_budgets.py."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.views import NodeView
from upgrader.core.policy.policy import Policy
from upgrader.core.rollout.schedule import NO_DOMAIN, Nodes, Standing, canary_domain, domain_order, plan_starts

from .factories import T0, at, node, policy
from .schedule_fixtures import DONE, FAILED, REQ, S, fleet, starts

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
    schedule = plan_starts(Nodes([]), Policy(), T0, True)
    assert (schedule.starts, schedule.current_domain, schedule.domains) == ([], None, [])
    assert canary_domain([], Policy()) is None


# ----- the domain the rollout is on ------------------------------------------------------------------


def test_a_node_in_progress_in_another_domain_finishes_before_anything_starts() -> None:
    """b's node is in progress (the order changed, a zone was relabelled, a replica had another
    order) while the rollout is on a: nothing starts until it is done, then a goes on."""
    nodes = fleet(("n1", "b", S.CORDON_REQUIRED), ("n2", "a", REQ), ("n3", "a", REQ), ("n4", "b", REQ))
    schedule = plan_starts(Nodes(nodes), policy(maxParallelUpgrades=0, maxUnavailable="100%"), T0, True)
    assert (schedule.starts, schedule.current_domain) == ([], "a")
    assert schedule.waiting == (
        "nodes of domain b are in progress while the rollout is on domain a (the order, a zone label or "
        "the fleet changed mid-rollout): no node starts until they finish; in progress: n1"
    )
    done = fleet(("n1", "b", DONE), ("n2", "a", REQ), ("n3", "a", REQ), ("n4", "b", REQ))
    assert plan_starts(Nodes(done), policy(maxParallelUpgrades=0, maxUnavailable="100%"), T0, True).starts == [
        "n2",
        "n3",
    ]


def test_the_domain_the_rollout_is_on_keeps_starting_beside_its_own_nodes_in_progress() -> None:
    nodes = fleet(("n1", "b", S.CORDON_REQUIRED), ("n2", "a", DONE), ("n4", "b", REQ))
    schedule = plan_starts(Nodes(nodes), policy(maxParallelUpgrades=2, maxUnavailable=2), T0, True)
    assert (schedule.starts, schedule.current_domain) == (["n4"], "b")


def test_the_rollout_stays_on_its_domain_until_it_is_finished() -> None:
    """The last status said b: b goes on though the policy now puts c first."""
    nodes = fleet(("b1", "b", DONE), ("b2", "b", REQ), ("c1", "c", REQ))
    pol = policy(failureDomains={"order": ["c", "b"]})
    schedule = plan_starts(Nodes(nodes), pol, T0, True, Standing(last_domain="b"))
    assert (schedule.starts, schedule.current_domain) == (["b2"], "b")


def test_a_node_of_a_finished_domain_needing_the_upgrade_again_waits_for_the_orders_next_turn() -> None:
    """a finished, b is the current domain (between two of its nodes): a re-requested a-node waits
    until b is done; then the order is read again from the canary, so a goes before c."""
    pol = policy(maxParallelUpgrades=1)
    nodes = fleet(("a1", "a", REQ), ("b1", "b", DONE), ("b2", "b", REQ), ("c1", "c", REQ))
    assert plan_starts(Nodes(nodes), pol, T0, True, Standing(last_domain="b")).starts == ["b2"]
    nodes = fleet(("a1", "a", REQ), ("b1", "b", DONE), ("b2", "b", DONE), ("c1", "c", REQ))
    schedule = plan_starts(Nodes(nodes), pol, T0, True, Standing(last_domain="b"))
    assert (schedule.starts, schedule.current_domain) == (["a1"], "a")


def test_the_soak_counts_from_the_domain_the_rollout_left() -> None:
    nodes = fleet(("a1", "a", REQ), ("b1", "b", DONE, {"since": -30}), ("c1", "c", REQ))
    pol = policy(failureDomains={"soakSeconds": 60})
    schedule = plan_starts(Nodes(nodes), pol, T0, True, Standing(last_domain="b"))
    assert (schedule.starts, schedule.waiting) == (
        [],
        f"soaking domain b for 30s more (failureDomains.soakSeconds 60, until {at(30)}); then domain a starts",
    )


def test_a_last_domain_that_is_gone_starts_from_the_order() -> None:
    nodes = fleet(("a1", "a", REQ), ("b1", "b", REQ))
    assert plan_starts(Nodes(nodes), Policy(), T0, True, Standing(last_domain="zone-that-was")).starts == ["a1"]


# ----- domains, soak, pause ------------------------------------------------------------------------


def test_the_next_domain_waits_until_the_current_is_finished() -> None:
    nodes = fleet(("a1", "a", DONE), ("a2", "a", S.UNCORDON_REQUIRED), ("b1", "b", REQ), ("b2", "b", REQ))
    schedule = plan_starts(Nodes(nodes), policy(maxParallelUpgrades=0, maxUnavailable="100%"), T0, True)
    assert (schedule.starts, schedule.current_domain) == ([], "a")
    assert schedule.waiting == "domain b waits for the canary domain a to finish: a2 (in progress)"


def test_the_canary_domain_goes_first() -> None:
    nodes = fleet(("a1", "a", REQ), ("b1", "b", REQ), ("c1", "c", REQ))
    schedule = plan_starts(Nodes(nodes), policy(failureDomains={"canary": "c"}), T0, True)
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
    schedule = plan_starts(Nodes(_soaking()), SOAK, now, True)
    then = f"{waiting}; then domain b starts" if waiting else None
    assert (schedule.starts, schedule.current_domain, schedule.waiting) == (expected, "b", then)


def test_soak_does_not_stop_a_domain_already_under_way() -> None:
    nodes = [*_soaking(), node("b2", S.POD_RESTART_REQUIRED, zone="b")]
    pol = policy(maxParallelUpgrades=2, maxUnavailable="100%", failureDomains={"soakSeconds": 600})
    schedule = plan_starts(Nodes(nodes), pol, T0 + 300, True)
    assert (schedule.starts, schedule.waiting) == (["b1"], None)


def test_the_first_domain_does_not_soak() -> None:
    nodes = fleet(("a1", "a", REQ, {"since": 0}))
    assert starts(nodes, SOAK, now=T0) == ["a1"]


def test_may_start_false_starts_nothing() -> None:
    nodes = fleet(("a1", "a", REQ), ("a2", "a", REQ))
    schedule = plan_starts(Nodes(nodes), Policy(), T0, False)
    assert (schedule.starts, schedule.current_domain, schedule.waiting) == ([], "a", None)
    assert (schedule.in_progress, schedule.unavailable) == (0, 0)


def test_acknowledged_failures_let_a_domain_finish() -> None:
    nodes = fleet(("a1", "a", DONE), ("a2", "a", FAILED), ("b1", "b", REQ))
    held = plan_starts(Nodes(nodes), policy(maxUnavailable=2), T0, True)
    assert (held.starts, held.current_domain) == ([], "a")
    moved = plan_starts(Nodes(nodes), policy(maxUnavailable=2), T0, True, Standing({"a2"}))
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
    pol = policy(maxUnavailable=2, onNodeFailure="continue")
    schedule = plan_starts(Nodes(nodes), pol, T0, True, Standing(acknowledged))
    assert (schedule.starts, schedule.current_domain) == (started, current)


def test_under_on_node_failure_halt_a_failed_node_holds_its_domain() -> None:
    nodes = fleet(("a1", "a", DONE), ("b1", "b", FAILED), ("b2", "b", DONE), ("c1", "c", REQ))
    schedule = plan_starts(Nodes(nodes), policy(maxUnavailable=2), T0, True)
    assert (schedule.starts, schedule.current_domain) == ([], "b")


def test_a_failed_node_still_costs_budget_when_acknowledged() -> None:
    # It stays cordoned, so it is unavailable: with maxUnavailable 1 nothing else may start.
    nodes = fleet(("a1", "a", FAILED), ("b1", "b", REQ))
    schedule = plan_starts(Nodes(nodes), policy(maxUnavailable=1), T0, True, Standing({"a1"}))
    assert (schedule.starts, schedule.current_domain) == ([], "b")
    assert schedule.waiting == (
        "maxUnavailable 1 reached: a1 (upgrade-failed); recover it or raise maxUnavailable; "
        "see runbooks/rollout-halted.md"
    )


def test_everything_finished() -> None:
    nodes = fleet(("a1", "a", DONE), ("b1", "b", DONE))
    schedule = plan_starts(Nodes(nodes), Policy(), T0, True)
    assert (schedule.starts, schedule.current_domain, schedule.waiting) == ([], None, None)
