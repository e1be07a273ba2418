"""The wait-for-jobs step: which pods it waits for, how it names them, and what its timeout does."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.actions import Annotate
from upgrader.core.model.states import BLOCKED_KIND
from upgrader.core.report.entries import NodeWaiting
from upgrader.core.rollout.stepping import Conclusion, conclude, waiting_entry

from .factories import T0, at, gpu_pod, node, pod, policy, run_step, snapshot, step
from .steps_fixtures import S, blocked, failed, moved

# ----- wait for jobs --------------------------------------------------------------------------------------


def _jobs_snapshot(*pods: Any) -> Any:
    return snapshot([node(state=S.WAIT_FOR_JOBS_REQUIRED, since=0, unschedulable=True)], list(pods))


def test_wait_for_jobs_without_selector_moves_on_at_once() -> None:
    snap = _jobs_snapshot(gpu_pod("train-0", owner="Job", labels={"app": "train"}))
    plan, actions = run_step(snap, now=T0 + 1)
    assert plan.waiting is None
    assert actions == [moved(S.WAIT_FOR_JOBS_REQUIRED, S.POD_DELETION_REQUIRED, T0 + 1)]


def test_wait_for_jobs_waits_for_selected_pods_without_timeout() -> None:
    snap = _jobs_snapshot(
        gpu_pod("train-0", owner="Job", labels={"app": "train"}),
        gpu_pod("train-1", owner="Job", labels={"app": "train"}, phase="Succeeded"),
        pod("web-0", labels={"app": "web"}),
    )
    pol = policy(waitForCompletion={"podSelector": "app=train"})
    plan, actions = run_step(snap, pol=pol, now=T0 + 10 * 86400)
    assert plan.waiting == (
        "waiting for 1 job pod to finish: default/train-0 (waitForCompletion.podSelector app=train, no timeout)"
    )
    assert actions == []


def test_wait_for_jobs_moves_on_when_selected_pods_are_done() -> None:
    snap = _jobs_snapshot(
        gpu_pod("train-0", owner="Job", labels={"app": "train"}, phase="Succeeded"),
        gpu_pod("train-1", owner="Job", labels={"app": "train"}, phase="Failed"),
        pod("web-0", labels={"app": "web"}),
    )
    _, actions = run_step(snap, pol=policy(waitForCompletion={"podSelector": "app=train"}), now=T0 + 30)
    assert actions == [moved(S.WAIT_FOR_JOBS_REQUIRED, S.POD_DELETION_REQUIRED, T0 + 30)]


def test_wait_for_jobs_names_at_most_five_pods() -> None:
    snap = _jobs_snapshot(*[pod(f"job-{i}", owner="Job", labels={"app": "train"}) for i in range(7)])
    _, plan = step(snap, pol=policy(waitForCompletion={"podSelector": "app=train", "timeoutSeconds": 60}))
    assert plan.waiting == (
        "waiting for 7 job pods to finish: default/job-0, default/job-1, default/job-2, default/job-3, "
        "default/job-4 and 2 more (waitForCompletion.podSelector app=train, timeout 60s)"
    )


JOBS_WAITING = (
    "waiting for 1 job pod to finish: default/train-0 (waitForCompletion.podSelector app=train, timeout 600s)"
)


@pytest.mark.parametrize(
    ("on_blocked", "now", "expected"),
    [
        ("halt", T0 + 599, []),
        ("fail", T0 + 599, []),
        (
            "halt",
            T0 + 600,
            blocked(
                "wait-for-jobs",
                JOBS_WAITING + " (past the 600s timeout)",
                at(0),  # blocked since the node entered the state: that is when the wait began
                S.WAIT_FOR_JOBS_REQUIRED,
                "wait-for-jobs-timeout",
            ),
        ),
        (
            "fail",
            T0 + 600,
            failed(
                S.WAIT_FOR_JOBS_REQUIRED,
                "wait-for-jobs",
                "not done within the 600s timeout: " + JOBS_WAITING,
                T0 + 600,
                "wait-for-jobs-timeout",
            ),
        ),
    ],
)
def test_wait_for_jobs_timeout(on_blocked: str, now: float, expected: list[Any]) -> None:
    snap = _jobs_snapshot(gpu_pod("train-0", owner="Job", labels={"app": "train"}))
    pol = policy(waitForCompletion={"podSelector": "app=train", "timeoutSeconds": 600}, onBlockedTimeout=on_blocked)
    _, actions = run_step(snap, pol=pol, now=now)
    assert actions == expected


def test_a_normal_wait_is_reported_as_waiting_not_blocked() -> None:
    snap = _jobs_snapshot(gpu_pod("train-0", owner="Job", labels={"app": "train"}))
    ctx, plan = step(snap, pol=policy(waitForCompletion={"podSelector": "app=train", "timeoutSeconds": 600}))
    concluded = conclude(ctx, plan, [], T0)
    assert concluded.actions == [] and concluded.waiting == JOBS_WAITING
    assert waiting_entry(ctx, concluded) == NodeWaiting("n1", "wait-for-jobs-required", JOBS_WAITING, at(0))
    assert waiting_entry(ctx, Conclusion([Annotate("n1", {BLOCKED_KIND: "wait-for-jobs"})], JOBS_WAITING)) is None
