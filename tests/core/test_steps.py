"""Each in-progress state's step and its conclusion: what is attempted, what blocks, what moves on.

A step is decided on a snapshot and concluded with the outcomes of its attempts and an explicit
`now`; the tests assert the actions and the words a user sees.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from upgrader.core.actions import (
    Annotate,
    DeletePod,
    Event,
    Evict,
    Outcome,
    Result,
    SetUnschedulable,
    Transition,
)
from upgrader.core.policy import Policy
from upgrader.core.rollout import conclude, waiting_entry
from upgrader.core.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    DRIVER_DELETED_AT,
    DRIVER_POD_UID,
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    GPU_BEFORE,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    PER_UPGRADE,
    REQUESTED_ANNOTATION,
    STARTED_AT,
    STATE_SINCE,
    TARGET_REVISION,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.steps import Blocked, StepPlan

from .factories import (
    NEW,
    OLD,
    T0,
    at,
    driver_pod,
    gpu_pod,
    node,
    pdb,
    pod,
    policy,
    run_step,
    snapshot,
    step,
    transition,
    validator,
)

S = State
CLEARED_BLOCK = {BLOCKED_KIND: None, BLOCKED_REASON: None, BLOCKED_SINCE: None}
# What a node records on entering pod-restart-required: the pod to replace, a fresh restart clock,
# the revision to reach.
RESTART_ENTRY: dict[str, str | None] = {DRIVER_POD_UID: "driver-old", DRIVER_DELETED_AT: None, TARGET_REVISION: NEW}


def moved(source: State, target: State, now: float, **extra: str | None) -> Transition:
    """The transition a finished step concludes with."""
    return Transition(
        "n1",
        source,
        target,
        {STATE_SINCE: rfc(now), **CLEARED_BLOCK, **extra},
        f"{source.value} -> {target.value}",
    )


def rfc(now: float) -> str:
    return at(now - T0)


def blocked(kind: str, reason: str, since: str, state: State, runbook: str) -> list[Any]:
    return [
        Annotate("n1", {BLOCKED_KIND: kind, BLOCKED_REASON: reason, BLOCKED_SINCE: since}),
        Event("n1", "Warning", f"blocked in {state.value} since {since}: {reason}; see runbooks/{runbook}.md"),
    ]


def failed(
    state: State, kind: str, reason: str, now: float, runbook: str, ready_driver: str | None = None
) -> list[Any]:
    """`ready_driver`: the driver pod Ready at the newest revision the failure records (recovery)."""
    stamp = rfc(now)
    return [
        Transition(
            "n1",
            state,
            S.FAILED,
            {
                STATE_SINCE: stamp,
                FAILED_AT: stamp,
                FAILED_KIND: kind,
                FAILED_STATE: state.value,
                FAILED_REASON: reason,
                FAILED_DRIVER_POD: ready_driver,
                **CLEARED_BLOCK,
            },
            reason,
        ),
        Event("n1", "Warning", f"upgrade failed in {state.value}: {reason}; see runbooks/{runbook}.md"),
    ]


# ----- cordon ------------------------------------------------------------------------------------------


def test_cordon_marks_the_node_unschedulable_then_moves_on() -> None:
    view = node(state=S.CORDON_REQUIRED, since=0, annotations={WAS_UNSCHEDULABLE: "false"})
    plan, actions = run_step(snapshot([view]), now=T0 + 5)
    assert plan.attempts == [SetUnschedulable("n1", True)]
    assert actions == [moved(S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED, T0 + 5)]


@pytest.mark.parametrize("record", [None, "true"])
def test_a_cordon_upgrader_sets_itself_is_recorded_as_its_own_first(record: str | None) -> None:
    """Found by the property search: an admin's cordon at the start, lifted by the admin before upgrader
    cordoned: the cordon upgrader sets is its own and is lifted at the end. The record goes first."""
    marks = {} if record is None else {WAS_UNSCHEDULABLE: record, OPERATOR_INITIAL_UNSCHEDULABLE: "true"}
    plan, _ = run_step(snapshot([node(state=S.CORDON_REQUIRED, since=0, annotations=marks)]), now=T0 + 5)
    assert plan.attempts == [
        Annotate("n1", {WAS_UNSCHEDULABLE: "false", OPERATOR_INITIAL_UNSCHEDULABLE: None}),
        SetUnschedulable("n1", True),
    ]


def test_cordon_skips_the_patch_when_already_unschedulable() -> None:
    plan, actions = run_step(snapshot([node(state=S.CORDON_REQUIRED, since=0, unschedulable=True)]), now=T0 + 5)
    assert plan.attempts == []
    assert actions == [moved(S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED, T0 + 5)]


@pytest.mark.parametrize("result", [Result.ERROR, Result.CONFLICT])
def test_a_failed_write_is_retried_next_pass_not_concluded(result: Result) -> None:
    snap = snapshot([node(state=S.CORDON_REQUIRED, since=0)])
    _, plan = step(snap)
    _, actions = run_step(snap, now=T0 + 5, outcomes=[Outcome(plan.attempts[0], result, "etcdserver: timeout")])
    assert actions == []


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
    assert waiting_entry(ctx, plan, []) == {
        "node": "n1",
        "state": "wait-for-jobs-required",
        "reason": JOBS_WAITING,
        "since": at(0),
    }
    assert waiting_entry(ctx, plan, [Annotate("n1", {BLOCKED_KIND: "wait-for-jobs"})]) is None


# ----- GPU pod deletion -----------------------------------------------------------------------------------


def _deletion(*pods: Any, annotations: dict[str, str] | None = None) -> Any:
    return snapshot(
        [node(state=S.POD_DELETION_REQUIRED, since=0, unschedulable=True, annotations=annotations)],
        [driver_pod(uid="driver-old"), validator(), *pods],
        pdbs=[pdb("web", selector="app=web", allowed=0, healthy=2, desired=2)],
    )


def test_pod_deletion_evicts_only_gpu_pods() -> None:
    train = gpu_pod("train-0", labels={"app": "train"}, uid="u-train")
    infer = gpu_pod("infer-0", namespace="serving", gpus=4, uid="u-infer")
    snap = _deletion(
        train,
        infer,
        pod("web-0", labels={"app": "web"}),  # no GPU: left alone
        gpu_pod("done-0", phase="Succeeded"),  # finished: nothing to delete
        gpu_pod("static-0", mirror=True, owner="Node"),  # a mirror pod cannot be evicted
    )
    plan, actions = run_step(snap, now=T0 + 3)
    assert plan.attempts == [
        Evict("n1", "default", "train-0", "u-train"),
        Evict("n1", "serving", "infer-0", "u-infer"),
    ]
    assert plan.blocked is None
    assert plan.waiting == "evicting 2 pods: default/train-0, serving/infer-0"  # a wait with the step's clock
    assert actions == []  # evicted; the pods are gone on a later pass


def test_pod_deletion_moves_on_when_no_gpu_pod_is_left() -> None:
    snap = _deletion(pod("web-0", labels={"app": "web"}), gpu_pod("done-0", phase="Succeeded"))
    _, actions = run_step(snap, now=T0 + 9)
    # Entering pod-restart-required records the driver pod to replace.
    assert actions == [moved(S.POD_DELETION_REQUIRED, S.POD_RESTART_REQUIRED, T0 + 9, **RESTART_ENTRY)]


def test_pod_deletion_moves_to_drain_only_when_every_node_is_drained() -> None:
    _, actions = run_step(_deletion(), pol=policy(drain={"enable": True}, drainEveryNode=True), now=T0 + 9)
    assert actions == [moved(S.POD_DELETION_REQUIRED, S.DRAIN_REQUIRED, T0 + 9)]


def test_with_drain_enabled_a_finished_pod_deletion_goes_straight_to_the_restart() -> None:
    _, actions = run_step(_deletion(), pol=policy(drain={"enable": True}), now=T0 + 9)
    assert actions == [moved(S.POD_DELETION_REQUIRED, S.POD_RESTART_REQUIRED, T0 + 9, **RESTART_ENTRY)]


@pytest.mark.parametrize(
    ("pods", "knobs", "reason"),
    [
        (
            [gpu_pod("solo", owner=None)],
            {},
            "cannot evict: default/solo not managed by a controller (set gpuPodDeletion.force to delete)",
        ),
        (
            [gpu_pod("scratch", empty_dir=True)],
            {},
            "cannot evict: default/scratch uses emptyDir (set gpuPodDeletion.deleteEmptyDir to delete)",
        ),
        (
            [gpu_pod("solo", owner=None), gpu_pod("scratch", empty_dir=True), gpu_pod("fine")],
            {},
            "cannot evict: default/solo not managed by a controller (set gpuPodDeletion.force to delete); "
            "default/scratch uses emptyDir (set gpuPodDeletion.deleteEmptyDir to delete)",
        ),
        (
            [gpu_pod("solo", owner=None, empty_dir=True)],
            {"force": True},
            "cannot evict: default/solo uses emptyDir (set gpuPodDeletion.deleteEmptyDir to delete)",
        ),
        (
            [gpu_pod("solo", owner=None, empty_dir=True)],
            {"deleteEmptyDir": True},
            "cannot evict: default/solo not managed by a controller (set gpuPodDeletion.force to delete)",
        ),
    ],
)
def test_pod_deletion_blocks_on_pods_the_policy_does_not_allow_to_delete(
    pods: list[Any], knobs: dict[str, Any], reason: str
) -> None:
    plan, actions = run_step(_deletion(*pods), pol=policy(gpuPodDeletion=knobs), now=T0 + 7)
    assert plan.attempts == []  # nothing is evicted while one pod may not be
    assert plan.blocked == Blocked("pod-deletion", reason)
    assert actions == blocked("pod-deletion", reason, at(7), S.POD_DELETION_REQUIRED, "gpu-pod-deletion-blocked")


@pytest.mark.parametrize(
    ("knobs", "evicted"),
    [({"force": True}, ["solo"]), ({"deleteEmptyDir": True}, ["scratch"])],
)
def test_force_and_delete_empty_dir_allow_the_eviction(knobs: dict[str, Any], evicted: list[str]) -> None:
    pods = [gpu_pod("solo", owner=None)] if "force" in knobs else [gpu_pod("scratch", empty_dir=True)]
    plan, _ = run_step(_deletion(*pods), pol=policy(gpuPodDeletion=knobs))
    assert [a.name for a in plan.attempts] == evicted


PDB_REASON = (
    "eviction of default/web-0 refused by PodDisruptionBudget default/web "
    "(disruptionsAllowed=0, currentHealthy=2, desiredHealthy=2)"
)
REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


def _refused(plan: StepPlan, *names: str) -> list[Outcome]:
    return [
        Outcome(a, Result.BLOCKED, REFUSED) if getattr(a, "name", "") in names else Outcome(a, Result.OK)
        for a in plan.attempts
    ]


def test_a_pdb_refused_eviction_is_a_block_naming_the_budget() -> None:
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}), gpu_pod("train-0"))
    _, plan = step(snap)
    assert [a.name for a in plan.attempts] == ["web-0", "train-0"]
    _, actions = run_step(snap, now=T0 + 20, outcomes=_refused(plan, "web-0"))
    assert actions == blocked("pdb", PDB_REASON, at(20), S.POD_DELETION_REQUIRED, "pdb-blocked-eviction")


def test_refusals_are_grouped_by_budget() -> None:
    snap = snapshot(
        [node(state=S.POD_DELETION_REQUIRED, since=0)],
        [
            gpu_pod("web-1", labels={"app": "web"}),
            gpu_pod("web-0", labels={"app": "web"}),
            gpu_pod("db-0", namespace="data", labels={"app": "db"}),
            gpu_pod("loose-0", labels={"app": "loose"}),
        ],
        pdbs=[
            pdb("web", selector="app=web", allowed=0, healthy=3, desired=3, expected=3),
            pdb("db", namespace="data", selector="app=db", allowed=0, healthy=1, desired=1, expected=1),
        ],
    )
    _, plan = step(snap)
    _, actions = run_step(snap, now=T0 + 1, outcomes=_refused(plan, "web-1", "web-0", "db-0", "loose-0"))
    assert actions[0] == Annotate(
        "n1",
        {
            BLOCKED_KIND: "pdb",
            BLOCKED_REASON: "eviction of default/loose-0 refused by PodDisruptionBudget (unknown budget) ("
            + REFUSED
            + "); eviction of data/db-0 refused by PodDisruptionBudget data/db "
            "(disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1); "
            "eviction of default/web-1, default/web-0 refused by PodDisruptionBudget default/web "
            "(disruptionsAllowed=0, currentHealthy=3, desiredHealthy=3)",
            BLOCKED_SINCE: at(1),
        },
    )


def test_the_block_since_time_is_kept_across_passes() -> None:
    held = {BLOCKED_KIND: "pdb", BLOCKED_REASON: PDB_REASON, BLOCKED_SINCE: at(20)}
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}), annotations=held)
    _, plan = step(snap)
    # Same block, later pass: nothing to write again.
    _, actions = run_step(snap, now=T0 + 80, outcomes=_refused(plan, "web-0"))
    assert actions == []


def test_a_changed_reason_of_the_same_kind_keeps_the_since_time() -> None:
    held = {BLOCKED_KIND: "pdb", BLOCKED_REASON: "an older wording", BLOCKED_SINCE: at(20)}
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}), annotations=held)
    _, plan = step(snap)
    _, actions = run_step(snap, now=T0 + 80, outcomes=_refused(plan, "web-0"))
    assert actions == blocked("pdb", PDB_REASON, at(20), S.POD_DELETION_REQUIRED, "pdb-blocked-eviction")


def test_another_kind_of_block_starts_a_new_since_time() -> None:
    held = {BLOCKED_KIND: "pod-deletion", BLOCKED_REASON: "cannot evict: x", BLOCKED_SINCE: at(20)}
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}), annotations=held)
    _, plan = step(snap)
    _, actions = run_step(snap, now=T0 + 80, outcomes=_refused(plan, "web-0"))
    assert actions == blocked("pdb", PDB_REASON, at(80), S.POD_DELETION_REQUIRED, "pdb-blocked-eviction")


@pytest.mark.parametrize(
    ("on_blocked", "expected"),
    [
        (
            "halt",
            blocked(
                "pdb",
                PDB_REASON + " (past the 300s timeout)",
                at(20),
                S.POD_DELETION_REQUIRED,
                "pdb-blocked-eviction",
            ),
        ),
        (
            "fail",
            failed(
                S.POD_DELETION_REQUIRED,
                "pdb",
                PDB_REASON + "; blocked past the 300s timeout",
                T0 + 300,
                "pdb-blocked-eviction",
            ),
        ),
    ],
)
def test_a_pdb_block_past_the_gpu_pod_deletion_timeout(on_blocked: str, expected: list[Any]) -> None:
    held = {BLOCKED_KIND: "pdb", BLOCKED_REASON: PDB_REASON, BLOCKED_SINCE: at(20)}
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}), annotations=held)
    pol = policy(onBlockedTimeout=on_blocked)
    _, plan = step(snap, pol=pol)
    _, actions = run_step(snap, pol=pol, now=T0 + 300, outcomes=_refused(plan, "web-0"))
    assert actions == expected


def test_a_block_that_lifts_is_cleared() -> None:
    held = {BLOCKED_KIND: "pdb", BLOCKED_REASON: PDB_REASON, BLOCKED_SINCE: at(20)}
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}), annotations=held)
    _, actions = run_step(snap, now=T0 + 90)  # the eviction went through this time
    assert actions == [
        Annotate("n1", CLEARED_BLOCK),
        Event("n1", "Normal", "no longer blocked in pod-deletion-required"),
    ]


def test_terminating_gpu_pods_are_waited_for_not_evicted_again() -> None:
    snap = _deletion(gpu_pod("train-0", terminating=True), gpu_pod("train-1"))
    plan, actions = run_step(snap, now=T0 + 30)
    assert [a.name for a in plan.attempts] == ["train-1"]
    assert plan.waiting == "evicting 1 pod: default/train-1; waiting for 1 pod to terminate: default/train-0"
    assert actions == []


def test_pods_stuck_terminating_past_the_timeout_block() -> None:
    snap = _deletion(gpu_pod("train-0", terminating=True))
    _, actions = run_step(snap, pol=policy(gpuPodDeletion={"timeoutSeconds": 120}), now=T0 + 120)
    assert actions == blocked(
        "pod-deletion",
        "waiting for 1 pod to terminate: default/train-0 (past the 120s timeout)",
        at(0),
        S.POD_DELETION_REQUIRED,
        "gpu-pod-deletion-blocked",
    )


def test_an_eviction_error_is_retried_next_pass() -> None:
    snap = _deletion(gpu_pod("train-0"))
    _, plan = step(snap)
    _, actions = run_step(snap, now=T0 + 5, outcomes=[Outcome(plan.attempts[0], Result.ERROR, "503")])
    assert actions == []


# ----- drain -------------------------------------------------------------------------------------------


def _drain(*pods: Any) -> Any:
    return snapshot(
        [node(state=S.DRAIN_REQUIRED, since=0, unschedulable=True)],
        [driver_pod(uid="driver-old"), validator(), *pods],
    )


DRAIN_PODS = [
    pod("web-0", labels={"app": "web"}, uid="u-web"),
    pod("batch-0", labels={"gpu-workload": "true"}, owner="Job", uid="u-batch"),
    pod("kube-proxy-x", namespace="kube-system", owner="DaemonSet", owner_name="kube-proxy"),
    pod("etcd-n1", namespace="kube-system", owner="Node", mirror=True),
    pod("old-job", owner="Job", phase="Succeeded"),
]


@pytest.mark.parametrize(
    ("selector", "evicted"),
    [
        ("", ["default/web-0", "default/batch-0"]),
        ("gpu-workload=true", ["default/batch-0"]),
        ("app notin (web)", ["default/batch-0"]),
        ("nothing=here", []),
    ],
)
def test_drain_excludes_daemonset_pods_and_honours_the_selector(selector: str, evicted: list[str]) -> None:
    plan, actions = run_step(
        _drain(*DRAIN_PODS), pol=policy(drain={"enable": True, "podSelector": selector}), now=T0 + 4
    )
    assert [f"{a.namespace}/{a.name}" for a in plan.attempts] == evicted
    assert all(isinstance(a, Evict) for a in plan.attempts)
    if evicted:
        assert actions == []  # evicted: the pods are gone on a later pass
    else:
        assert actions == [moved(S.DRAIN_REQUIRED, S.POD_RESTART_REQUIRED, T0 + 4, **RESTART_ENTRY)]


def test_drain_blocks_on_unmanaged_pods_naming_the_drain_knob() -> None:
    plan, actions = run_step(_drain(pod("solo", owner=None)), pol=policy(drain={"enable": True}), now=T0 + 4)
    assert plan.attempts == []
    reason = "cannot evict: default/solo not managed by a controller (set drain.force to delete)"
    assert actions == blocked("drain", reason, at(4), S.DRAIN_REQUIRED, "drain-blocked")


def test_drain_with_nothing_to_evict_moves_on() -> None:
    _, actions = run_step(_drain(DRAIN_PODS[2], DRAIN_PODS[3]), pol=policy(drain={"enable": True}), now=T0 + 4)
    assert actions == [moved(S.DRAIN_REQUIRED, S.POD_RESTART_REQUIRED, T0 + 4, **RESTART_ENTRY)]


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
    assert plan.waiting == "restarting driver pod gpu-operator/nvidia-driver-n1-rev-old"
    # The restart's own clock starts with the deletion, whatever time was spent getting here.
    assert actions == [Annotate("n1", {DRIVER_DELETED_AT: rfc(T0 + 2)})]


def test_a_driver_pod_already_gone_does_not_restart_the_restart_clock() -> None:
    """A delete answered 404 (the pod is gone, the view lags): nothing was restarted by this pass,
    so the clock keeps counting from entering the state and the restart timeout can fire."""
    old = driver_pod(revision=OLD, uid="driver-old")
    snap = _restart(old, validator())
    ctx, plan = step(snap)
    gone = [Outcome(a, Result.GONE) for a in plan.attempts]
    assert conclude(ctx, plan, gone, T0 + 2) == []
    timeout = policy().pod_restart.timeout_seconds
    actions = conclude(ctx, plan, gone, T0 + timeout)
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


# ----- uncordon and done ----------------------------------------------------------------------------------

UPGRADE_ANNOTATIONS = {
    STARTED_AT: at(-1000),
    GPU_BEFORE: "8",
    DRIVER_POD_UID: "driver-old",
    TARGET_REVISION: NEW,
    REQUESTED_ANNOTATION: "true",
    "example.com/keep-me": "yes",
}


@pytest.mark.parametrize(
    ("was", "unschedulable", "attempts"),
    [
        ("false", True, [SetUnschedulable("n1", False)]),
        ("true", True, []),  # someone else had cordoned it before us: it stays cordoned
        ("false", False, []),  # already schedulable
        (None, False, []),  # someone uncordoned it: nothing to decide
    ],
)
def test_uncordon_respects_who_cordoned_the_node(was: str | None, unschedulable: bool, attempts: list[Any]) -> None:
    annotations = dict(UPGRADE_ANNOTATIONS)
    if was is not None:
        annotations[WAS_UNSCHEDULABLE] = was
    snap = snapshot([node(state=S.UNCORDON_REQUIRED, since=0, unschedulable=unschedulable, annotations=annotations)])
    plan, actions = run_step(snap, now=T0 + 70)
    assert plan.attempts == attempts
    assert transition(actions).target is S.DONE


@pytest.mark.parametrize(("was", "shown"), [(None, "missing"), ("yes", "'yes', not true or false")])
def test_a_cordon_no_record_says_is_ours_stays_and_blocks(was: str | None, shown: str) -> None:
    """A lost record must not lift an admin's cordon: the node stays cordoned, and says why."""
    annotations = {**UPGRADE_ANNOTATIONS, **({WAS_UNSCHEDULABLE: was} if was is not None else {})}
    snap = snapshot([node(state=S.UNCORDON_REQUIRED, since=0, unschedulable=True, annotations=annotations)])
    plan, actions = run_step(snap, now=T0 + 70)
    assert plan.attempts == []
    assert actions == blocked(
        "cordon-record",
        f"no record says upgrader cordoned the node ({WAS_UNSCHEDULABLE} is {shown}), so it stays cordoned: "
        f"uncordon it yourself if upgrader cordoned it, or annotate {WAS_UNSCHEDULABLE}=false",
        at(70),
        S.UNCORDON_REQUIRED,
        "cordon-record-missing",
    )


def test_reaching_done_clears_the_per_upgrade_and_requested_annotations() -> None:
    held = {
        **UPGRADE_ANNOTATIONS,
        WAS_UNSCHEDULABLE: "false",
        FAILED_KIND: "image",
        BLOCKED_KIND: "pdb",
        BLOCKED_REASON: "x",
        BLOCKED_SINCE: at(5),
    }
    snap = snapshot([node(state=S.UNCORDON_REQUIRED, since=0, unschedulable=True, annotations=held)])
    _, actions = run_step(snap, now=T0 + 70)
    assert actions == [
        Transition(
            "n1",
            S.UNCORDON_REQUIRED,
            S.DONE,
            {STATE_SINCE: at(70), **{k: None for k in PER_UPGRADE}, REQUESTED_ANNOTATION: None},
            "uncordon-required -> upgrade-done",
        )
    ]


def test_per_upgrade_annotations_are_upgraders_own() -> None:
    assert all(k.startswith("gpu-upgrader.io/") for k in PER_UPGRADE)
    assert STATE_SINCE not in PER_UPGRADE


def test_every_in_progress_state_has_a_step() -> None:
    from upgrader.core.states import IN_PROGRESS
    from upgrader.core.steps import STEPS

    assert set(STEPS) == set(IN_PROGRESS)


def test_default_policy_is_used_when_none_given() -> None:
    assert step(snapshot([node(state=S.CORDON_REQUIRED)]))[0].policy == Policy()


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


@pytest.mark.parametrize(
    ("budget", "disrupted"),
    [
        (pdb("web", allowed=0, healthy=2, desired=2, expected=3), frozenset()),  # a pod of it is down
        (pdb("web", allowed=1, healthy=3, desired=2, expected=3), frozenset({"default/web"})),  # spent this pass
    ],
    ids=["budget-spent-by-a-disruption", "budget-spent-this-pass"],
)
def test_a_refusal_by_a_spent_budget_is_a_wait_not_a_block(budget: Any, disrupted: frozenset[str]) -> None:
    snap = snapshot(
        [node(state=S.POD_DELETION_REQUIRED, since=0)], [gpu_pod("web-0", labels={"app": "web"})], pdbs=[budget]
    )
    ctx, plan = step(snap)
    actions = conclude(ctx, plan, _refused(plan, "web-0"), T0 + 1, disrupted)
    assert actions == []  # no block annotations, no halt: the budget comes back by itself
    assert plan.waiting == (
        "eviction of default/web-0 waits for PodDisruptionBudget default/web: a disruption is in progress"
    )


def test_a_spent_budget_past_the_deletion_timeout_blocks() -> None:
    snap = snapshot(
        [node(state=S.POD_DELETION_REQUIRED, since=0)],
        [gpu_pod("web-0", labels={"app": "web"})],
        pdbs=[pdb("web", allowed=0, healthy=2, desired=2, expected=3)],
    )
    ctx, plan = step(snap)
    actions = conclude(ctx, plan, _refused(plan, "web-0"), T0 + 301)
    assert isinstance(actions[0], Annotate) and actions[0].annotations[BLOCKED_KIND] == "pod-deletion"
    assert "(past the 300s timeout)" in actions[0].annotations[BLOCKED_REASON]
