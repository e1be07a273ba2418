"""The notices a pass gives, from the status before it and its own: each once, when first said."""

from __future__ import annotations

import pytest

from upgrader.core.policy.notices import NoticeKind, notices
from upgrader.core.policy.policy import policy_from_mapping

RUNNING = {"phase": "Running", "failed": [], "domains": [{"name": "a", "canary": True, "done": 1, "nodes": 2}]}


def kinds(previous: dict, status: dict, staged: bool = False) -> list[str]:  # type: ignore[type-arg]
    return [n.kind.value for n in notices(previous, status, staged)]


def test_a_halt_a_failure_and_the_end_are_told_once() -> None:
    failed = {"node": "a2", "since": "T1", "reason": "validation: not done within 600s"}
    halted = {**RUNNING, "phase": "Halted", "message": "halted: a2 upgrade-failed", "failed": [failed]}
    assert kinds(RUNNING, halted) == ["halted", "failed"]
    assert kinds(halted, halted) == []
    assert notices(RUNNING, halted, False)[1].text == "a2 upgrade-failed: validation: not done within 600s"
    again = {**halted, "failed": [{**failed, "since": "T2"}]}  # the same node failing again later
    assert kinds(halted, again) == ["failed"]
    done = {**RUNNING, "phase": "Done", "message": "done", "domains": [{**RUNNING["domains"][0], "done": 2}]}
    assert kinds(RUNNING, done) == ["canaryDone", "done"]
    assert kinds(done, done) == [] and kinds({}, done) == ["canaryDone"], "a first status is no end"


def test_staged_canary_is_done_when_its_wait_begins_and_a_promotion_wait_is_told_per_stage() -> None:
    waiting = {**RUNNING, "message": "awaiting promotion: ...",
               "waiting_on": {"reason": "awaiting-promotion", "stage": "a/canaryNodes"}}
    assert kinds(RUNNING, waiting, staged=True) == ["canaryDone", "awaitingPromotion"]
    assert kinds(waiting, waiting, staged=True) == []
    nxt = {**waiting, "waiting_on": {"reason": "awaiting-promotion", "stage": "a"}}
    assert kinds(waiting, nxt, staged=True) == ["awaitingPromotion"]


@pytest.mark.parametrize(("hook", "said"), [
    ({"url": "ftp://x"}, "must be an http:// or https:// URL"),
    ({}, "give url or urlFile (one of them)"),
    ({"url": "http://x", "urlFile": "/f"}, "give url or urlFile (one of them)"),
    ({"url": "http://x", "events": ["nope"]}, "notifications.webhooks.0.events.0"),
])
def test_a_bad_webhook_is_refused_naming_it(hook: dict, said: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError) as raised:
        policy_from_mapping({"notifications": {"webhooks": [hook]}})
    assert said in str(raised.value)
    assert NoticeKind.DONE.value == "done"


def test_canary_nodes_as_many_as_the_canary_domain_is_the_whole_domain_so_its_end_is_told() -> None:
    from upgrader.core.policy.notices import staged_canary

    policy = policy_from_mapping({"failureDomains": {"canaryNodes": 3}})
    small = {"domains": [{"name": "a", "canary": True, "nodes": 2, "done": 2}]}
    large = {"domains": [{"name": "a", "canary": True, "nodes": 10, "done": 0}]}
    assert staged_canary(policy, small) is False and staged_canary(policy, large) is True
    before = {"phase": "Running", "domains": [{"name": "a", "canary": True, "nodes": 2, "done": 1}]}
    told = notices(before, {"phase": "Running", **small}, staged_canary(policy, small))
    assert [n.text for n in told] == ["the canary domain a is done: 2 nodes"]


def test_with_pools_each_pools_canary_and_promotion_wait_is_told_by_pool_and_once() -> None:
    gate = {"reason": "awaiting-promotion", "stage": "inference:c", "finished_at": "T"}
    before = {"phase": "Running", "pools": [
        {"name": "training", "domains": [{"name": "a", "canary": True, "nodes": 2, "done": 1}], "waiting_on": None},
        {"name": "inference", "message": "rolling", "domains": [], "waiting_on": None}]}
    after = {"phase": "Running", "waiting_on": gate, "pools": [
        {"name": "training", "domains": [{"name": "a", "canary": True, "nodes": 2, "done": 2}], "waiting_on": None},
        {"name": "inference", "message": "awaiting promotion: domain c", "domains": [], "waiting_on": gate}]}
    told = notices(before, after, False, {"training": False, "inference": False})
    assert [(n.kind.value, n.text) for n in told] == [
        ("canaryDone", "pool training: the canary domain a is done: 2 nodes"),
        ("awaitingPromotion", "pool inference: awaiting promotion: domain c"),
    ]
    assert notices(after, after, False, {}) == []


def test_with_pools_a_halt_is_told_per_pool_that_halts() -> None:
    running = {"phase": "Running", "pools": [{"name": "a", "phase": "Running"}, {"name": "b", "phase": "Running"}]}
    one = {"phase": "Halted", "pools": [{"name": "a", "phase": "Halted", "message": "halted: n1 blocked"},
                                        {"name": "b", "phase": "Running"}]}
    two = {"phase": "Halted", "pools": [{"name": "a", "phase": "Halted", "message": "halted: n1 blocked"},
                                        {"name": "b", "phase": "Halted", "message": "halted: n7 failed"}]}
    assert [n.text for n in notices(running, one, False)] == ["pool a: halted: n1 blocked"]
    assert [n.text for n in notices(one, two, False)] == ["pool b: halted: n7 failed"]
