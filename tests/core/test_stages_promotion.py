"""promotionGate and `upgrader promote`'s record (spec.promotions): after the canary (its first nodes,
or its domain) or after every domain the rollout waits for a person; a promotion names the stage and
its finish, ends a soak early, and does not cover a later finish (docs/policy.md#promotion)."""

from __future__ import annotations

from upgrader.core.rollout.schedule import Nodes, Standing, plan_starts

from .factories import T0, at, policy
from .schedule_fixtures import DONE, FAILED, REQ, fleet

WIDE = {"maxParallelUpgrades": 10, "maxUnavailable": "100%"}


def _after_canary_domain() -> list:  # type: ignore[type-arg]
    return fleet(("a1", "a", DONE, {"since": 100}), ("a2", "a", DONE, {"since": 200}), ("b1", "b", REQ),
                 ("b2", "b", REQ), ("c1", "c", REQ))


def test_after_the_canary_domain_the_next_waits_for_a_promotion_of_that_finish() -> None:
    pol = policy(**WIDE, promotionGate="canary", failureDomains={"canary": "a"})
    schedule = plan_starts(Nodes(_after_canary_domain()), pol, T0 + 300, True)
    assert schedule.starts == [] and schedule.wait is not None
    assert (schedule.wait.reason, schedule.wait.stage, schedule.wait.runbook) == (
        "awaiting-promotion", ("a", at(200)), "runbooks/promotion.md")
    assert schedule.waiting == (
        f"awaiting promotion: domain a finished at {at(200)} (promotionGate); domain b starts once promoted: "
        "upgrader promote; see runbooks/promotion.md"
    )
    assert plan_starts(Nodes(_after_canary_domain()), pol, T0 + 300, True,
                       Standing(promoted={"a": at(200)})).starts == [
        "b1", "b2"]
    # a promotion of another finish (an earlier rollout's) does not cover this one
    assert plan_starts(Nodes(_after_canary_domain()), pol, T0 + 300, True,
                       Standing(promoted={"a": at(100)})).starts == []


def test_under_canary_only_the_canary_is_gated_and_under_every_domain_each_is() -> None:
    nodes = fleet(("a1", "a", DONE, {"since": 100}), ("b1", "b", DONE, {"since": 300}), ("c1", "c", REQ))
    canary = policy(**WIDE, promotionGate="canary", failureDomains={"canary": "a", "order": ["a", "b", "c"]})
    assert plan_starts(Nodes(nodes), canary, T0 + 400, True, Standing(last_domain="b")).starts == ["c1"]
    every = policy(**WIDE, promotionGate="everyDomain", failureDomains={"canary": "a", "order": ["a", "b", "c"]})
    schedule = plan_starts(Nodes(nodes), every, T0 + 400, True, Standing(last_domain="b"))
    assert schedule.wait is not None and schedule.wait.stage == ("b", at(300))
    promoted = Standing(last_domain="b", promoted={"b": at(300)})
    assert plan_starts(Nodes(nodes), every, T0 + 400, True, promoted).starts == ["c1"]


def test_with_canary_nodes_the_gate_is_after_them_not_after_their_domain() -> None:
    pol = policy(**WIDE, promotionGate="canary", failureDomains={"canary": "a", "canaryNodes": 1})
    nodes = fleet(("a1", "a", DONE, {"since": 50}), ("a2", "a", REQ), ("a3", "a", REQ), ("b1", "b", REQ))
    schedule = plan_starts(Nodes(nodes), pol, T0 + 60, True)
    assert schedule.wait is not None and schedule.wait.stage == ("a/canaryNodes", at(50))
    assert schedule.waiting == (
        f"awaiting promotion: a's 1 canary nodes finished at {at(50)} (promotionGate); the rest of domain a "
        "starts once promoted: upgrader promote; see runbooks/promotion.md"
    )
    promoted = {"a/canaryNodes": at(50)}
    assert plan_starts(Nodes(nodes), pol, T0 + 60, True, Standing(promoted=promoted)).starts == ["a2", "a3"]
    done = fleet(("a1", "a", DONE, {"since": 50}), ("a2", "a", DONE, {"since": 70}), ("b1", "b", REQ))
    assert plan_starts(Nodes(done), pol, T0 + 80, True, Standing(promoted=promoted)).starts == ["b1"], "no second gate"


def test_a_promotion_ends_a_soak_early() -> None:
    pol = policy(**WIDE, failureDomains={"canary": "a", "soakSeconds": 3600})
    soaking = plan_starts(Nodes(_after_canary_domain()), pol, T0 + 300, True)
    assert soaking.wait is not None and soaking.wait.reason == "soak" and soaking.wait.stage == ("a", at(200))
    assert plan_starts(Nodes(_after_canary_domain()), pol, T0 + 300, True,
                       Standing(promoted={"a": at(200)})).starts == [
        "b1", "b2"]


def test_a_failed_canary_is_not_passed_by_a_promotion() -> None:
    pol = policy(**WIDE, promotionGate="canary", failureDomains={"canary": "a"})
    nodes = fleet(("a1", "a", FAILED, {"since": 100}), ("a2", "a", DONE, {"since": 200}), ("b1", "b", REQ))
    for promoted in ({"a": at(200)}, {"a": at(100)}):
        schedule = plan_starts(Nodes(nodes), pol, T0 + 300, True, Standing(promoted=promoted))
        assert schedule.starts == [] and schedule.wait is not None and schedule.wait.reason == "previous-domain"
    assert plan_starts(Nodes(nodes), pol, T0 + 300, True, Standing({"a1"})).wait.reason == "awaiting-promotion"  # type: ignore[union-attr]


def test_a_gate_switched_on_mid_stage_waits_for_the_next_boundary_not_the_one_passed() -> None:
    """promotionGate turned on while the stage after a finished one is half done (none of it in progress
    this pass): that stage goes on; the gate holds at the next boundary (docs/policy.md#promotion)."""
    staged = policy(**WIDE, promotionGate="canary", failureDomains={"canary": "a", "canaryNodes": 1})
    half = fleet(("a1", "a", DONE, {"since": 50}), ("a2", "a", DONE, {"since": 70}), ("a3", "a", REQ),
                 ("b1", "b", REQ))
    assert plan_starts(Nodes(half), staged, T0 + 80, True).starts == ["a3"]
    every = policy(**WIDE, promotionGate="everyDomain", failureDomains={"canary": "a", "order": ["a", "b", "c"]})
    nodes = fleet(("a1", "a", DONE, {"since": 100}), ("b1", "b", DONE, {"since": 300}), ("b2", "b", REQ),
                  ("c1", "c", REQ))
    assert plan_starts(Nodes(nodes), every, T0 + 400, True, Standing(last_domain="b")).starts == ["b2"]
    promoted = Standing(last_domain="b", promoted={"a": at(100)})
    done = fleet(("a1", "a", DONE, {"since": 100}), ("b1", "b", DONE, {"since": 300}), ("c1", "c", REQ))
    assert plan_starts(Nodes(done), every, T0 + 400, True, promoted).wait.stage == ("b", at(300))  # type: ignore[union-attr]


def test_a_node_current_before_the_stage_finished_is_no_sign_the_next_began() -> None:
    pol = policy(**WIDE, promotionGate="canary", failureDomains={"canary": "a"})
    nodes = fleet(("a1", "a", DONE, {"since": 100}), ("b1", "b", DONE, {"since": 50}), ("b2", "b", REQ),
                  ("b3", "b", DONE))  # upgraded before the canary finished; no clock at all
    schedule = plan_starts(Nodes(nodes), pol, T0 + 300, True)
    assert schedule.starts == [] and schedule.wait is not None and schedule.wait.reason == "awaiting-promotion"
