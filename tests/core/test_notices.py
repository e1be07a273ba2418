"""The notices a pass gives, from the status before it and its own: each once, when first said."""

from __future__ import annotations

import pytest

from upgrader.core.policy.notices import Notice, NoticeKind, notices
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.core.report.document import RolloutStatus, read_status, to_dict

RUNNING = {"phase": "Running", "failed": [], "domains": [{"name": "a", "canary": True, "done": 1, "nodes": 2}]}

# What a test leaves out of a status, its entries and its pools: the rest of what the controller writes.
DOMAIN = {"canary": False, "nodes": 0, "done": 0, "in_progress": 0, "failed": 0, "by_state": {}}
FAILED = {"kind": "failed", "reason": "", "acknowledged": False, "state": "", "runbook": "runbooks/rollout-halted.md"}
WAIT = {"domain": None, "nodes": [], "count": 0}
POOL = {"selects": "nodeSelector pool=x", "phase": "Running", "message": "rolling"}


def _filled(part: dict, base: dict) -> dict:  # type: ignore[type-arg]
    out = {**base, **part}
    out["domains"] = [{**DOMAIN, **d} for d in part.get("domains", [])]
    if part.get("waiting_on"):
        out["waiting_on"] = {**WAIT, **part["waiting_on"]}
    return out


def stored(status: dict) -> RolloutStatus | None:  # type: ignore[type-arg]
    """`status` as the controller writes it, read back as the controller reads it (None for {}: none)."""
    if not status:
        return None
    full = _filled(status, {"message": ""})
    full["failed"] = [{**FAILED, **f} for f in status.get("failed", [])]
    if "pools" in status:
        full["pools"] = [_filled(p, POOL) for p in status["pools"]]
    read = read_status(full)
    assert read is not None and to_dict(read)["domains"] == full["domains"], "the test's status reads whole"
    assert len(read.failed) == len(full["failed"]) and len(read.pools or ()) == len(full.get("pools", ()))
    return read


def told(previous: dict, status: dict, staged: bool = False, pools: dict | None = None) -> list[Notice]:  # type: ignore[type-arg]
    now = stored(status)
    assert now is not None
    return notices(stored(previous), now, staged, pools)


def kinds(previous: dict, status: dict, staged: bool = False) -> list[str]:  # type: ignore[type-arg]
    return [n.kind.value for n in told(previous, status, staged)]


def test_a_halt_a_failure_and_the_end_are_told_once() -> None:
    failed = {"node": "a2", "since": "T1", "reason": "validation: not done within 600s"}
    halted = {**RUNNING, "phase": "Halted", "message": "halted: a2 upgrade-failed", "failed": [failed]}
    assert kinds(RUNNING, halted) == ["halted", "failed"]
    assert kinds(halted, halted) == []
    assert told(RUNNING, halted, False)[1].text == "a2 upgrade-failed: validation: not done within 600s"
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
    small_read, large_read = stored({"phase": "Running", **small}), stored({"phase": "Running", **large})
    assert small_read is not None and large_read is not None
    assert staged_canary(policy, small_read) is False and staged_canary(policy, large_read) is True
    before = {"phase": "Running", "domains": [{"name": "a", "canary": True, "nodes": 2, "done": 1}]}
    said = told(before, {"phase": "Running", **small}, staged_canary(policy, small_read))
    assert [n.text for n in said] == ["the canary domain a is done: 2 nodes"]


def test_with_pools_each_pools_canary_and_promotion_wait_is_told_by_pool_and_once() -> None:
    gate = {"reason": "awaiting-promotion", "stage": "inference:c", "finished_at": "T"}
    before = {"phase": "Running", "pools": [
        {"name": "training", "domains": [{"name": "a", "canary": True, "nodes": 2, "done": 1}], "waiting_on": None},
        {"name": "inference", "message": "rolling", "domains": [], "waiting_on": None}]}
    after = {"phase": "Running", "waiting_on": gate, "pools": [
        {"name": "training", "domains": [{"name": "a", "canary": True, "nodes": 2, "done": 2}], "waiting_on": None},
        {"name": "inference", "message": "awaiting promotion: domain c", "domains": [], "waiting_on": gate}]}
    said = told(before, after, False, {"training": False, "inference": False})
    assert [(n.kind.value, n.text) for n in said] == [
        ("canaryDone", "pool training: the canary domain a is done: 2 nodes"),
        ("awaitingPromotion", "pool inference: awaiting promotion: domain c"),
    ]
    assert told(after, after, False, {}) == []


def test_with_pools_a_halt_is_told_per_pool_that_halts() -> None:
    running = {"phase": "Running", "pools": [{"name": "a", "phase": "Running"}, {"name": "b", "phase": "Running"}]}
    one = {"phase": "Halted", "pools": [{"name": "a", "phase": "Halted", "message": "halted: n1 blocked"},
                                        {"name": "b", "phase": "Running"}]}
    two = {"phase": "Halted", "pools": [{"name": "a", "phase": "Halted", "message": "halted: n1 blocked"},
                                        {"name": "b", "phase": "Halted", "message": "halted: n7 failed"}]}
    assert [n.text for n in told(running, one, False)] == ["pool a: halted: n1 blocked"]
    assert [n.text for n in told(one, two, False)] == ["pool b: halted: n7 failed"]
