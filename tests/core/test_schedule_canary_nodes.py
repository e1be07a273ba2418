"""failureDomains.canaryNodes: the canary domain's first nodes go alone, the rest of the domain after
they are finished and have soaked; the choice holds as they progress (docs/policy.md#canary-nodes)."""

from __future__ import annotations

import pytest

from upgrader.core.policy.policy import policy_from_mapping
from upgrader.core.rollout.schedule import Nodes, Standing, canary_first, plan_starts

from .factories import T0, at, policy
from .schedule_fixtures import DONE, FAILED, REQ, S, fleet

WIDE = {"maxParallelUpgrades": 10, "maxUnavailable": "100%"}


def _domain(states: dict[str, S], since: int = 0) -> list:  # type: ignore[type-arg]
    return fleet(*((name, "a", state, {"since": since}) for name, state in states.items()),
                 ("b1", "b", REQ, {"since": 0}))


def test_only_the_first_nodes_start_then_the_rest_once_they_are_done() -> None:
    pol = policy(**WIDE, failureDomains={"canary": "a", "canaryNodes": 2})
    nodes = _domain({f"a{i}": REQ for i in range(1, 7)})
    assert plan_starts(Nodes(nodes), pol, T0, True).starts == ["a1", "a2"]

    nodes = _domain({"a1": S.DRAIN_REQUIRED, "a2": DONE, **{f"a{i}": REQ for i in range(3, 7)}})
    schedule = plan_starts(Nodes(nodes), pol, T0, True)
    assert schedule.starts == []
    assert schedule.wait is not None and schedule.wait.reason == "canary-nodes"
    assert schedule.waiting == (
        "the rest of the canary domain a (4 nodes) waits for its first 2 (failureDomains.canaryNodes) to finish: "
        "a1 (in progress)"
    )

    nodes = _domain({"a1": DONE, "a2": DONE, **{f"a{i}": REQ for i in range(3, 7)}})
    assert plan_starts(Nodes(nodes), pol, T0, True).starts == ["a3", "a4", "a5", "a6"]


def test_the_rest_waits_for_the_soak_after_the_first_nodes() -> None:
    pol = policy(**WIDE, failureDomains={"canary": "a", "canaryNodes": "20%", "soakSeconds": 600})
    nodes = _domain({"a1": DONE, **{f"a{i}": REQ for i in range(2, 6)}}, since=100)
    schedule = plan_starts(Nodes(nodes), pol, T0 + 300, True)
    assert schedule.starts == [] and schedule.wait is not None and schedule.wait.reason == "soak"
    assert schedule.waiting == (
        f"soaking a's 1 canary nodes for 400s more (failureDomains.soakSeconds 600, until {at(700)}); "
        "then the rest of domain a starts"
    )
    assert plan_starts(Nodes(nodes), pol, T0 + 700, True).starts == ["a2", "a3", "a4", "a5"]


def test_a_failed_first_node_holds_the_rest_until_it_is_acknowledged() -> None:
    pol = policy(**WIDE, failureDomains={"canary": "a", "canaryNodes": 1})
    nodes = _domain({"a1": FAILED, "a2": REQ, "a3": REQ})
    assert plan_starts(Nodes(nodes), pol, T0, True).waiting == (
        "the rest of the canary domain a (2 nodes) waits for its first 1 (failureDomains.canaryNodes) to finish: "
        "a1 (upgrade-failed, not acknowledged)"
    )
    assert plan_starts(Nodes(nodes), pol, T0, True, Standing({"a1"})).starts == ["a2", "a3"]


def test_the_choice_holds_as_nodes_progress_and_stays_finished() -> None:
    pol = policy(**WIDE, failureDomains={"canary": "a", "canaryNodes": 2})
    # a node of the rest named before the first ones started (the policy changed mid-rollout): it is
    # now among the first, and none waits on a name order
    nodes = _domain({"a0": S.CORDON_REQUIRED, "a1": DONE, "a2": REQ, "a3": REQ})
    assert [n.name for n in canary_first([n for n in nodes if n.name != "b1"], pol)] == ["a1", "a0"]
    # once finished, later nodes finishing never reopen it
    done = _domain({"a0": DONE, "a1": DONE, "a2": S.DRAIN_REQUIRED, "a3": REQ})
    assert plan_starts(Nodes(done), pol, T0, True).starts == ["a3"]


def test_a_count_as_large_as_the_domain_is_the_whole_domain() -> None:
    pol = policy(**WIDE, failureDomains={"canary": "a", "canaryNodes": 3})
    nodes = _domain({"a1": REQ, "a2": REQ, "a3": REQ})
    assert plan_starts(Nodes(nodes), pol, T0, True).starts == ["a1", "a2", "a3"]
    assert canary_first(nodes[:3], pol) == []


def test_other_domains_are_not_staged() -> None:
    pol = policy(**WIDE, failureDomains={"canary": "a", "canaryNodes": 1})
    nodes = fleet(("a1", "a", DONE), ("b1", "b", REQ), ("b2", "b", REQ))
    assert plan_starts(Nodes(nodes), pol, T0, True).starts == ["b1", "b2"]


@pytest.mark.parametrize(
    ("value", "size", "count"), [(2, 100, 2), ("5%", 100, 5), ("5%", 30, 2), ("1%", 3, 1), ("100%", 9, None)]
)
def test_the_count_of_a_percentage_rounds_up(value: int | str, size: int, count: int | None) -> None:
    assert policy_from_mapping({"failureDomains": {"canaryNodes": value}}).failure_domains.canary_count(size) == count


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (0, "must be at least 1 node, got 0"),
        ("0%", 'must be a number of nodes or a percentage from "1%" to "100%", got \'0%\''),
        ("five", 'must be a number of nodes or a percentage from "1%" to "100%", got \'five\''),
        (True, 'must be a number of nodes or a percentage like "5%", got True'),
    ],
)
def test_a_bad_count_is_refused_naming_the_key(value: object, said: str) -> None:
    with pytest.raises(ValueError, match="canaryNodes") as raised:
        policy_from_mapping({"failureDomains": {"canaryNodes": value}})
    assert said in str(raised.value)
