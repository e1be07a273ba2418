"""The GPU pod deletion and drain steps: what is evicted, what blocks (the policy, PDBs, pods stuck
terminating), their timeouts and the drain fallback; with the known bugs of evictions.
"""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.actions import Annotate, Event, Evict, Outcome, Result
from upgrader.core.model.states import BLOCKED_KIND, BLOCKED_REASON, BLOCKED_SINCE
from upgrader.core.node.step import Blocked, Step
from upgrader.core.rollout.stepping import conclude

from .factories import (
    T0,
    at,
    conclude_step,
    driver_pod,
    gpu_pod,
    node,
    pdb,
    pod,
    policy,
    run_step,
    snapshot,
    step,
    validator,
)
from .steps_fixtures import CLEARED_BLOCK, RESTART_ENTRY, S, blocked, failed, moved

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
    plan, concluded = conclude_step(snap, now=T0 + 3)
    actions = concluded.actions
    assert plan.attempts == [
        Evict("n1", "default", "train-0", "u-train"),
        Evict("n1", "serving", "infer-0", "u-infer"),
    ]
    assert plan.blocked is None
    assert concluded.waiting == "evicting 2 pods: default/train-0, serving/infer-0"  # a wait with the step's clock
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


def _refused(plan: Step, *names: str) -> list[Outcome]:
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
    plan, concluded = conclude_step(snap, now=T0 + 30)
    actions = concluded.actions
    assert [a.name for a in plan.attempts] == ["train-1"]
    assert concluded.waiting == "evicting 1 pod: default/train-1; waiting for 1 pod to terminate: default/train-0"
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


# ----- known bugs -----------------------------------------------------------------------------------------


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
    concluded = conclude(ctx, plan, _refused(plan, "web-0"), T0 + 1, disrupted)
    actions = concluded.actions
    assert actions == []  # no block annotations, no halt: the budget comes back by itself
    assert concluded.waiting == (
        "eviction of default/web-0 waits for PodDisruptionBudget default/web: a disruption is in progress"
    )


def test_a_spent_budget_past_the_deletion_timeout_blocks() -> None:
    snap = snapshot(
        [node(state=S.POD_DELETION_REQUIRED, since=0)],
        [gpu_pod("web-0", labels={"app": "web"})],
        pdbs=[pdb("web", allowed=0, healthy=2, desired=2, expected=3)],
    )
    ctx, plan = step(snap)
    actions = conclude(ctx, plan, _refused(plan, "web-0"), T0 + 301).actions
    assert isinstance(actions[0], Annotate) and actions[0].annotations[BLOCKED_KIND] == "pod-deletion"
    assert "(past the 300s timeout)" in actions[0].annotations[BLOCKED_REASON]
