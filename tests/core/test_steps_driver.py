"""The driver restart and validation steps: which driver pod is replaced, what they wait for, when
a timeout fails the node; with the known bug of the restart's clock.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from upgrader.core.model.actions import Annotate, DeletePod, Event, Outcome, Result, Transition
from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    DRIVER_DELETED_AT,
    DRIVER_POD_UID,
    GPU_BEFORE,
)
from upgrader.core.node.step import Blocked
from upgrader.core.rollout.stepping import conclude

from .factories import (
    NEW,
    OLD,
    T0,
    at,
    driver_pod,
    gpu_pod,
    node,
    policy,
    run_step,
    snapshot,
    step,
    transition,
    validator,
)
from .steps_fixtures import RESTART_ENTRY, S, blocked, failed, moved, rfc
from .test_fence import UNGUARDED

# ----- driver restart -------------------------------------------------------------------------------------


def _restart(*pods: Any, recorded: str | None = "driver-old") -> Any:
    annotations = {DRIVER_POD_UID: recorded} if recorded else {}
    return snapshot(
        [node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True, annotations=annotations)], list(pods)
    )


def test_restart_deletes_the_recorded_driver_pod() -> None:
    old = driver_pod(revision=OLD, uid="driver-old")
    plan, actions = run_step(_restart(old, validator()), now=T0 + 2)
    assert plan.attempts == [DeletePod("n1", "gpu-operator", "nvidia-driver-n1-rev-old", "driver-old")]
    assert plan.waiting == "restarting driver pod gpu-operator/nvidia-driver-n1-rev-old" + UNGUARDED
    # The restart's own clock starts with the deletion, whatever time was spent getting here.
    assert actions == [Annotate("n1", {DRIVER_DELETED_AT: rfc(T0 + 2)})]


def test_a_driver_pod_already_gone_does_not_restart_the_restart_clock() -> None:
    """A delete answered 404 (the pod is gone, the view lags): nothing was restarted by this pass,
    so the clock keeps counting from entering the state and the restart timeout can fire."""
    old = driver_pod(revision=OLD, uid="driver-old")
    snap = _restart(old, validator())
    ctx, plan = step(snap)
    gone = [Outcome(a, Result.GONE) for a in plan.attempts]
    assert conclude(ctx, plan, gone, T0 + 2).actions == []
    timeout = policy().pod_restart.timeout_seconds
    actions = conclude(ctx, plan, gone, T0 + timeout).actions
    assert [type(a) for a in actions] == [Transition, Event]
    assert transition(actions).target is S.FAILED


def test_restart_replaces_a_driver_pod_at_an_old_revision_even_if_not_recorded() -> None:
    old = driver_pod(revision=OLD, uid="driver-x")
    plan, _ = run_step(_restart(old, recorded=None))
    assert plan.attempts == [DeletePod("n1", "gpu-operator", "nvidia-driver-n1-rev-old", "driver-x")]


def test_restart_replaces_the_recorded_pod_even_at_the_newest_revision() -> None:
    # An upgrade requested by annotation: same revision, the pod must still be recreated.
    current = driver_pod(revision=NEW, uid="driver-old")
    plan, _ = run_step(_restart(current))
    assert plan.attempts == [DeletePod("n1", "gpu-operator", "nvidia-driver-n1-rev-new", "driver-old")]


@pytest.mark.parametrize(
    ("clients", "reason"),
    [
        (
            [gpu_pod("late-0"), gpu_pod("late-1", terminating=True)],
            "2 pods still hold GPUs: default/late-0, default/late-1; the driver cannot unload under them",
        ),
    ],
)
def test_restart_never_deletes_the_driver_under_running_gpu_pods(clients: list[Any], reason: str) -> None:
    plan, actions = run_step(
        _restart(driver_pod(uid="driver-old"), *clients, gpu_pod("gone", phase="Failed")), now=T0 + 2
    )
    assert plan.attempts == []
    assert actions == blocked("gpu-pods", reason, at(2), S.POD_RESTART_REQUIRED, "gpu-pods-still-running")


def test_restart_block_reason_for_one_gpu_pod_is_grammatical() -> None:
    _, plan = step(_restart(driver_pod(uid="driver-old"), gpu_pod("late-0")))
    assert plan.blocked == Blocked(
        "gpu-pods", "1 pod still holds GPUs: default/late-0; the driver cannot unload under them"
    )


@pytest.mark.parametrize(
    ("pods", "waiting"),
    [
        (
            [driver_pod(revision=OLD, uid="driver-old", terminating=True)],
            "waiting for the old driver pod to terminate",
        ),
        ([], "waiting for the driver DaemonSet to create the new driver pod"),
        (
            [
                driver_pod(revision=OLD, uid="driver-old", terminating=True),
                driver_pod(revision=NEW, ready=False),
            ],
            "driver pod gpu-operator/nvidia-driver-n1-rev-new not Ready",
        ),
        (
            [driver_pod(revision=NEW, ready=False, waiting_reason="PodInitializing")],
            "driver pod gpu-operator/nvidia-driver-n1-rev-new not Ready: PodInitializing",
        ),
    ],
)
def test_restart_waits_for_the_new_pod_at_the_newest_revision(pods: list[Any], waiting: str) -> None:
    plan, actions = run_step(_restart(*pods), now=T0 + 60)
    assert plan.attempts == []
    assert plan.waiting == waiting
    assert actions == []


def test_restart_moves_on_when_the_new_driver_pod_is_ready() -> None:
    pods = [
        driver_pod(revision=OLD, uid="driver-old", terminating=True),
        driver_pod(revision=NEW, ready=True),
    ]
    _, actions = run_step(_restart(*pods), now=T0 + 90)
    assert actions == [moved(S.POD_RESTART_REQUIRED, S.VALIDATION_REQUIRED, T0 + 90)]


PULL = 'Back-off pulling image "nvcr.io/nvidia/driver:550.54.15-ubuntu22.04"'


@pytest.mark.parametrize(
    ("reason", "message", "kind", "runbook"),
    [
        ("ImagePullBackOff", PULL, "image", "missing-driver-image"),
        ("ErrImagePull", "manifest unknown", "image", "missing-driver-image"),
        (
            "CrashLoopBackOff",
            "back-off 5m0s restarting failed container",
            "driver-restart",
            "driver-pod-not-ready",
        ),
    ],
)
@pytest.mark.parametrize("on_blocked", ["halt", "fail"])  # a restart timeout fails the node either way
def test_restart_fails_with_the_pod_reason_after_its_timeout(
    reason: str, message: str, kind: str, runbook: str, on_blocked: str
) -> None:
    new = driver_pod(revision=NEW, ready=False, waiting_reason=reason, waiting_message=message)
    snap = _restart(new)
    pol = policy(podRestart={"timeoutSeconds": 900}, onBlockedTimeout=on_blocked)
    assert run_step(snap, pol=pol, now=T0 + 899)[1] == []
    waiting = f"driver pod gpu-operator/nvidia-driver-n1-rev-new not Ready: {reason}: {message}"
    # The pod it failed with is recorded, Ready or not (see recovery).
    assert run_step(snap, pol=pol, now=T0 + 900)[1] == failed(
        S.POD_RESTART_REQUIRED, kind, f"not done within the 900s timeout: {waiting}", T0 + 900, runbook, new.uid
    )


def test_restart_without_a_known_driver_set_goes_by_the_recorded_pod() -> None:
    snap = snapshot(
        [node(state=S.POD_RESTART_REQUIRED, since=0, annotations={DRIVER_POD_UID: "driver-old"})],
        [driver_pod(revision="whatever", uid="driver-new", ready=True)],
        driver_sets=[],
    )
    _, actions = run_step(snap, now=T0 + 5)
    assert actions == [moved(S.POD_RESTART_REQUIRED, S.VALIDATION_REQUIRED, T0 + 5)]


# ----- validation -----------------------------------------------------------------------------------------


def _validation(
    driver: Any = None,
    validators: tuple[Any, ...] | None = None,
    gpus: str | None = "8",
    version: str | None = "550.54.15",
    before: str | None = "8",
) -> Any:
    annotations = {GPU_BEFORE: before} if before is not None else {}
    return snapshot(
        [
            node(
                state=S.VALIDATION_REQUIRED,
                since=0,
                unschedulable=True,
                gpus=gpus,
                driver_version=version,
                annotations=annotations,
            )
        ],
        [
            driver if driver is not None else driver_pod(revision=NEW, ready=True),
            *(validators if validators is not None else (validator(ready=True),)),
        ],
    )


def test_validation_passes_when_everything_checks_out() -> None:
    _, actions = run_step(_validation(), now=T0 + 45)
    assert actions == [moved(S.VALIDATION_REQUIRED, S.UNCORDON_REQUIRED, T0 + 45)]


@pytest.mark.parametrize(
    ("snap", "problems"),
    [
        (
            _validation(driver=driver_pod(revision=NEW, ready=False)),
            "driver pod not Ready at the new revision",
        ),
        (_validation(validators=()), "no validator pod (app=nvidia-operator-validator) on the node"),
        (
            _validation(validators=(validator(ready=True, terminating=True),)),
            "no validator pod (app=nvidia-operator-validator) on the node",
        ),
        (
            _validation(validators=(validator(ready=False),)),
            "validator pod gpu-operator/nvidia-operator-validator-n1 not Ready",
        ),
        (_validation(gpus="0"), "nvidia.com/gpu allocatable 0, expected 8"),
        (_validation(gpus=None), "nvidia.com/gpu allocatable missing, expected 8"),
        (
            _validation(version="535.104.05"),
            "node reports driver 535.104.05, expected 550.54.15 (module not reloaded)",
        ),
        (
            _validation(driver=driver_pod(revision=NEW, ready=False), validators=(), gpus="4", version="535.104.05"),
            "driver pod not Ready at the new revision; "
            "no validator pod (app=nvidia-operator-validator) on the node; "
            "nvidia.com/gpu allocatable 4, expected 8; "
            "node reports driver 535.104.05, expected 550.54.15 (module not reloaded)",
        ),
    ],
)
def test_validation_waits_then_fails_listing_what_failed(snap: Any, problems: str) -> None:
    plan, actions = run_step(snap, now=T0 + 599)
    assert plan.waiting == problems
    assert actions == []
    _, actions = run_step(snap, now=T0 + 600)
    # The driver pod at the newest revision is recorded: after a failed validation the node recovers
    # only from another.
    ready = [p.uid for p in snap.driver_pods["n1"] if p.revision_hash == NEW]
    assert actions == failed(
        S.VALIDATION_REQUIRED,
        "validation",
        f"not done within the 600s timeout: {problems}",
        T0 + 600,
        "validation-failure",
        ready[0] if ready else None,
    )


@pytest.mark.parametrize(
    "snap",
    [
        _validation(version=None),  # no GPU Feature Discovery labels: nothing to compare
        _validation(before=None),  # allocatable not recorded at start
        _validation(before="0", gpus="8"),
    ],
)
def test_validation_checks_only_what_it_knows(snap: Any) -> None:
    _, plan = step(snap)
    assert plan.trigger == "validated"


@pytest.mark.parametrize("ready", [True, False])
def test_validation_restarts_the_driver_again_when_a_newer_revision_came_out(ready: bool) -> None:
    # The DaemonSet moved on (newest NEW) while the node validated the pod it restarted earlier: with
    # OnDelete nothing replaces that pod, so waiting could only end in a validation timeout.
    snap = _validation(driver=driver_pod(revision=OLD, ready=ready, uid="driver-old"))
    _, actions = run_step(snap, now=T0 + 30)
    assert actions == [moved(S.VALIDATION_REQUIRED, S.POD_RESTART_REQUIRED, T0 + 30, **RESTART_ENTRY)]


def test_validation_without_a_known_newest_revision_goes_by_the_pod_it_has() -> None:
    snap = _validation(driver=driver_pod(revision=OLD, ready=True))
    _, plan = step(replace(snap, driver_sets=[]))
    assert plan.trigger == "validated"


def test_validation_without_validator_selector_skips_validator_pods() -> None:
    _, plan = step(_validation(validators=()), pol=policy(validation={"podSelector": ""}))
    assert plan.trigger == "validated"


def test_validation_timeout_is_the_policys() -> None:
    snap = _validation(validators=())
    pol = policy(validation={"timeoutSeconds": 120})
    assert only_kind(run_step(snap, pol=pol, now=T0 + 119)[1]) == []
    assert only_kind(run_step(snap, pol=pol, now=T0 + 120)[1]) == [Transition, Event]


def only_kind(actions: list[Any]) -> list[type]:
    return [type(a) for a in actions]


# ----- known bugs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "annotations",
    [
        {
            BLOCKED_KIND: "gpu-pods",
            BLOCKED_REASON: "1 pod still hold GPUs: default/late-0",
            BLOCKED_SINCE: at(10),
        },
        {},  # the controller was down for a while after the node entered the state
    ],
    ids=["after-a-gpu-pod-block", "after-controller-downtime"],
)
def test_the_pass_that_deletes_the_old_driver_pod_does_not_fail_the_node(annotations: dict[str, str]) -> None:
    snap = snapshot(
        [
            node(
                state=S.POD_RESTART_REQUIRED,
                since=0,
                unschedulable=True,
                annotations={DRIVER_POD_UID: "driver-old", **annotations},
            )
        ],
        [driver_pod(revision=OLD, uid="driver-old")],
    )
    plan, actions = run_step(snap, now=T0 + 700)  # past the 600s default, the old driver pod never deleted
    assert plan.attempts == [DeletePod("n1", "gpu-operator", "nvidia-driver-n1-rev-old", "driver-old")]
    assert not any(isinstance(a, Transition) and a.target is S.FAILED for a in actions)
