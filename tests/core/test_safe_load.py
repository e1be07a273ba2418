"""The GPU Operator's safe driver loading (k8s-operator-libs `safe_driver_load_manager.go`, read for
the rules, not copied): a node whose driver pod waits for a safe load goes through the upgrade, and the
load is unblocked by removing the annotation at the restart step (and again in validation, should the
driver restart there); and a PodDisruptionBudget over the driver pods, which a restart deletes anyway."""

from __future__ import annotations

from upgrader.core.model.actions import Annotate, Transition
from upgrader.core.model.states import DRIVER_POD_UID, SAFE_LOAD_ANNOTATION, State
from upgrader.core.plan.report import PlanOptions, build_plan
from upgrader.core.rollout.detect import detect

from .factories import NEW, T0, driver_pod, node, pdb, policy, run_step, snapshot, validator
from .test_fence import UNGUARDED

S = State
WAITING = {SAFE_LOAD_ANNOTATION: "true"}


def test_a_node_whose_driver_waits_for_a_safe_load_needs_the_upgrade() -> None:
    """Its driver pod already runs the newest revision (it restarted after a reboot) and waits."""
    done = node(state=S.DONE, annotations=WAITING)
    actions = detect(snapshot([done], [driver_pod(revision=NEW, ready=False)]), policy(), T0)
    moved = [a for a in actions if isinstance(a, Transition)]
    assert [(t.source, t.target) for t in moved] == [(S.DONE, S.UPGRADE_REQUIRED)]
    assert moved[0].message == f"its driver pod waits for a safe load (annotation {SAFE_LOAD_ANNOTATION})"


def test_the_restart_step_unblocks_the_load_of_the_driver_at_the_newest_revision() -> None:
    view = node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True,
                annotations={**WAITING, DRIVER_POD_UID: "driver-old"})
    plan, _ = run_step(snapshot([view], [driver_pod(revision=NEW, ready=False), validator()]), now=T0 + 2)
    assert plan.attempts == [Annotate("n1", {SAFE_LOAD_ANNOTATION: None})]
    assert plan.trigger is None, "it waits for the driver to load and turn Ready"


def test_the_old_driver_pod_is_deleted_first_the_load_unblocked_only_at_the_new_revision() -> None:
    view = node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True,
                annotations={**WAITING, DRIVER_POD_UID: "driver-old"})
    plan, _ = run_step(snapshot([view], [driver_pod(uid="driver-old"), validator()]), now=T0 + 2)
    assert not any(isinstance(a, Annotate) for a in plan.attempts)


def test_validation_unblocks_a_driver_that_restarted_there_and_waits_again() -> None:
    view = node(state=S.VALIDATION_REQUIRED, since=0, unschedulable=True, annotations=WAITING)
    plan, _ = run_step(snapshot([view], [driver_pod(revision=NEW), validator()]), now=T0 + 2)
    assert Annotate("n1", {SAFE_LOAD_ANNOTATION: None}) in plan.attempts


def test_a_budget_over_the_driver_pods_is_said_when_the_restart_deletes_them() -> None:
    budget = pdb("drivers", namespace="gpu-operator", selector="app=nvidia-driver-daemonset", allowed=0)
    view = node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True, annotations={DRIVER_POD_UID: "driver-old"})
    plan, _ = run_step(snapshot([view], [driver_pod(uid="driver-old"), validator()], pdbs=[budget]), now=T0 + 2)
    assert plan.waiting == (
        "restarting driver pod gpu-operator/nvidia-driver-n1-rev-old (deleted although PodDisruptionBudget "
        "gpu-operator/drivers selects it: a driver restart does not evict)"
        + UNGUARDED  # the test's node carries no operand label (core/node/fence.py)
    )


def test_plan_warns_of_a_budget_over_the_driver_pods() -> None:
    budget = pdb("drivers", namespace="gpu-operator", selector="app=nvidia-driver-daemonset", allowed=0)
    snap = snapshot([node(zone="a", state=S.UPGRADE_REQUIRED)], [driver_pod()], pdbs=[budget])
    result = build_plan(snap, policy(), T0, PlanOptions())
    found = [f for f in result.findings if f.kind == "pdb-selects-driver-pod"]
    assert [(f.node, f.severity) for f in found] == [("n1", "warning")]
    assert found[0].message.startswith(
        "PodDisruptionBudget gpu-operator/drivers selects driver pod gpu-operator/nvidia-driver-n1-rev-old: the driver "
        "restart deletes it anyway, as the GPU Operator does"
    )
