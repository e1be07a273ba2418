"""The GPU Operator's upgrade behaviour a migrating user relies on, decided by the core: GPU pod deletion
with drain as its fallback, the drain-skip pod label, and the Events that follow what landed.

Scenarios are taken from k8s-operator-libs `pkg/upgrade` (upgrade_state_test.go, pod_manager_test.go)
and gpu-operator (internal/predicates/restart_only_test.go); the expected words are what a user sees.
The rest of the parity: test_operator_parity_annotations.py, _recovery.py and _restart_only.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.actions import (
    Action,
    Annotate,
    DeletePod,
    Event,
    Evict,
    Outcome,
    Result,
    Transition,
)
from upgrader.core.model.states import (
    DRAIN_SKIP_LABEL,
    STARTED_AT,
    State,
)
from upgrader.core.node.step import Step
from upgrader.core.rollout.reconcile import reconcile

from .factories import (
    OLD,
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
    transition,
    validator,
)
from .operator_parity_fixtures import S

DRAIN = {"drain": {"enable": True}}


def _deletion(*pods: Any, claims: dict[str, bool] | None = None) -> Any:
    return snapshot(
        [node(state=S.POD_DELETION_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})],
        [driver_pod(uid="driver-old"), validator(), *pods],
        pdbs=[pdb("web", selector="app=web", allowed=0, healthy=2, desired=2)],
        claims=claims,
    )


def _refused(plan: Step, name: str) -> list[Outcome]:
    return [
        Outcome(a, Result.BLOCKED, "Cannot evict pod") if getattr(a, "name", "") == name else Outcome(a, Result.OK)
        for a in plan.attempts
    ]


# ----- GPU pod deletion, and drain as its fallback -----------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "why"),
    [
        ([gpu_pod("solo", owner=None)], "default/solo not managed by a controller"),
        ([gpu_pod("scratch", empty_dir=True)], "default/scratch uses emptyDir"),
    ],
)
def test_pods_the_policy_may_not_delete_send_the_node_to_drain_at_once(pods: list[Any], why: str) -> None:
    plan, actions = run_step(_deletion(*pods), pol=policy(**DRAIN), now=T0 + 5)
    assert plan.attempts == []  # as the Operator: nothing is evicted when not every GPU pod can be
    moved = transition(actions)
    assert (moved.source, moved.target) == (S.POD_DELETION_REQUIRED, S.DRAIN_REQUIRED)
    warning = [a for a in actions if isinstance(a, Event)]
    assert len(warning) == 1 and warning[0].type == "Warning"
    assert warning[0].message.startswith("GPU pod deletion cannot finish: cannot evict: " + why)
    assert warning[0].message.endswith("drain.enable is set, so the node is drained")


@pytest.mark.parametrize(
    "pods", [[gpu_pod("solo", owner=None, terminating=True)], [gpu_pod("s", empty_dir=True, terminating=True)]]
)
def test_a_pod_already_terminating_is_waited_for_not_drained(pods: list[Any]) -> None:
    plan, actions = run_step(_deletion(*pods), pol=policy(**DRAIN), now=T0 + 5)
    assert not any(isinstance(a, Transition) for a in actions) and plan.blocked is None
    assert plan.waiting is not None and plan.waiting.startswith("waiting for 1 pod to terminate")


def test_the_gpu_pods_it_may_delete_go_first_then_the_drain_takes_the_rest() -> None:
    """Ours: the Operator evicts none when one cannot go; evicting the rest first leaves a narrow
    drain.podSelector (NVIDIA's advice) only the pods deletion could not take."""
    solo, web = gpu_pod("solo", owner=None), gpu_pod("train-0", uid="u-train")
    plan, concluded = conclude_step(_deletion(solo, web), pol=policy(**DRAIN), now=T0 + 5)
    actions = concluded.actions
    assert [a.uid for a in plan.attempts if isinstance(a, Evict)] == ["u-train"]
    assert not any(isinstance(a, Transition) for a in actions)
    assert concluded.waiting == (
        "evicting 1 pod: default/train-0; cannot evict: default/solo not managed by a controller (set "
        "gpuPodDeletion.force to delete); the rest go first"
    )
    _, actions = run_step(_deletion(solo, gpu_pod("train-0", terminating=True)), pol=policy(**DRAIN), now=T0 + 6)
    assert not any(isinstance(a, Transition) for a in actions)  # still terminating
    _, actions = run_step(_deletion(solo), pol=policy(**DRAIN), now=T0 + 7)
    assert transition(actions).target is S.DRAIN_REQUIRED


def test_without_drain_the_same_pods_halt_the_rollout_as_before() -> None:
    _, actions = run_step(_deletion(gpu_pod("solo", owner=None)), now=T0 + 5)
    assert not any(isinstance(a, Transition) for a in actions)
    assert isinstance(actions[0], Annotate) and actions[0].annotations["gpu-upgrader.io/blocked-kind"] == "pod-deletion"


def test_a_refused_eviction_blocks_until_the_deletion_timeout_then_drains() -> None:
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}))
    pol = policy(gpuPodDeletion={"timeoutSeconds": 300}, **DRAIN)
    _, plan = step(snap, pol=pol)
    _, early = run_step(snap, pol=pol, now=T0 + 299, outcomes=_refused(plan, "web-0"))
    assert not any(isinstance(a, Transition) for a in early)  # blocked: the rollout halts meanwhile
    _, late = run_step(snap, pol=pol, now=T0 + 300, outcomes=_refused(plan, "web-0"))
    assert transition(late).target is S.DRAIN_REQUIRED
    assert "PodDisruptionBudget default/web" in transition(late).message


def test_pods_that_never_terminate_drain_after_the_timeout() -> None:
    snap = _deletion(gpu_pod("stuck", terminating=True))
    _, actions = run_step(snap, pol=policy(gpuPodDeletion={"timeoutSeconds": 60}, **DRAIN), now=T0 + 60)
    assert transition(actions).target is S.DRAIN_REQUIRED
    assert "waiting for 1 pod to terminate: default/stuck (past the 60s timeout)" in transition(actions).message


def test_no_deletion_timeout_means_no_fallback_for_a_refusal() -> None:
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}))
    pol = policy(gpuPodDeletion={"timeoutSeconds": 0}, **DRAIN)
    _, plan = step(snap, pol=pol)
    _, actions = run_step(snap, pol=pol, now=T0 + 86_400, outcomes=_refused(plan, "web-0"))
    assert not any(isinstance(a, Transition) for a in actions)


def test_the_drain_skips_pods_labelled_drain_skip() -> None:
    snap = snapshot(
        [node(state=S.DRAIN_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})],
        [
            pod("operator", labels={DRAIN_SKIP_LABEL: "true", "app": "gpu-operator"}),
            pod("keep-false", labels={DRAIN_SKIP_LABEL: "false"}),
            pod("web"),
        ],
    )
    plan, _ = run_step(snap, pol=policy(**DRAIN), now=T0 + 1)
    assert sorted(a.name for a in plan.attempts if isinstance(a, Evict)) == ["keep-false", "web"]


def test_gpu_pod_deletion_evicts_mig_and_dra_pods_but_not_others() -> None:
    snap = _deletion(
        gpu_pod("mig", uid="u-mig"),  # gpus counts MIG slices as well (views)
        pod("dra", claims=("default/gpu-claim",), uid="u-dra"),
        pod("nic", claims=("default/nic-claim",), uid="u-nic"),
        pod("done", claims=("default/gpu-claim",), phase="Succeeded"),
        claims={"default/gpu-claim": True, "default/nic-claim": False},
    )
    _, plan = step(snap)
    assert sorted(a.name for a in plan.attempts if isinstance(a, Evict)) == ["dra", "mig"]


def test_the_restart_waits_for_a_dra_gpu_pod() -> None:
    snap = snapshot(
        [node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})],
        [driver_pod(uid="driver-old"), pod("dra", claims=("default/gpu-claim",))],
        claims={"default/gpu-claim": True},
    )
    _, plan = step(snap)
    assert plan.blocked is not None and "default/dra" in plan.blocked.reason
    assert not any(isinstance(a, DeletePod) for a in plan.attempts)


# ----- Events follow what landed -------------------------------------------------------------------------


def _events_of(outcome_for: Any) -> list[Event]:
    snap = snapshot(
        [node(state=S.CORDON_REQUIRED, since=0, annotations={STARTED_AT: at(0)})],
        [driver_pod(revision=OLD)],
    )
    applied: list[Action] = []

    def apply(actions: list[Action]) -> list[Outcome]:
        out = [Outcome(a, outcome_for(a)) for a in actions]
        applied.extend(o.action for o in out if o.ok)
        return out

    reconcile(snap, policy(), T0 + 5, apply)
    return [a for a in applied if isinstance(a, Event)]


def test_every_state_change_that_landed_leaves_a_normal_event_in_the_operators_words() -> None:
    events = _events_of(lambda a: Result.OK)
    assert [(e.type, e.message) for e in events if e.node == "n1"] == [
        ("Normal", "Successfully updated node state label to wait-for-jobs-required (from cordon-required)")
    ]


def test_a_refused_state_change_leaves_no_event() -> None:
    events = _events_of(lambda a: Result.CONFLICT if isinstance(a, Transition) else Result.OK)
    assert [e for e in events if e.node == "n1"] == []


def test_a_warning_decided_with_a_refused_state_change_is_not_sent() -> None:
    """The drain fallback is a transition and a Warning: if the transition conflicts, neither happened."""
    snap = _deletion(gpu_pod("solo", owner=None))
    sent: list[Action] = []

    def apply(actions: list[Action]) -> list[Outcome]:
        out = [Outcome(a, Result.CONFLICT if isinstance(a, Transition) else Result.OK) for a in actions]
        sent.extend(o.action for o in out)
        return out

    reconcile(snap, policy(**DRAIN), T0 + 5, apply)
    assert any(isinstance(a, Transition) and a.target is S.DRAIN_REQUIRED for a in sent)
    assert [a for a in sent if isinstance(a, Event) and a.node == "n1"] == []


@pytest.mark.parametrize(
    ("state", "pol", "finished"),
    [
        (S.POD_DELETION_REQUIRED, {}, "Deleted workload pods on the node for the driver upgrade"),
        (S.DRAIN_REQUIRED, DRAIN, "Successfully drained the node"),
    ],
)
def test_finished_deletion_and_drain_are_told_as_the_operator_tells_them(
    state: State, pol: dict[str, Any], finished: str
) -> None:
    view = node(state=state, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})
    snap = snapshot([view], [driver_pod(revision=OLD)])
    applied: list[Action] = []

    def apply(actions: list[Action]) -> list[Outcome]:
        applied.extend(actions)
        return [Outcome(a, Result.OK) for a in actions]

    reconcile(snap, policy(**pol), T0 + 5, apply)
    messages = [a.message for a in applied if isinstance(a, Event) and a.node == "n1"]
    assert messages == [
        finished,
        f"Successfully updated node state label to pod-restart-required (from {state.value})",
    ]


def test_the_drain_also_takes_the_gpu_pods_a_pdb_kept_past_the_deletion_timeout() -> None:
    """Ours: the Operator's drain takes only drain.podSelector's pods; a GPU pod a PodDisruptionBudget
    held past gpuPodDeletion.timeoutSeconds would then keep the driver from restarting for ever."""
    snap = snapshot(
        [node(state=S.DRAIN_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})],
        [gpu_pod("train-1", uid="u-train"), pod("scratch", labels={"app": "scratch"}), pod("web")],
    )
    plan, actions = run_step(snap, pol=policy(drain={"enable": True, "podSelector": "app=scratch"}), now=T0 + 1)
    assert sorted(a.name for a in plan.attempts if isinstance(a, Evict)) == ["scratch", "train-1"]
    assert not any(isinstance(a, Transition) for a in actions)
