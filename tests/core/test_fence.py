"""The restart's admission guard (docs/policy.md#the-restarts-admission-guard), step by step: the GPU
Operator's operand labels paused and recorded before the driver pod is deleted, the delete only once the
paused operands' pods are gone, a GPU user found on the node while the driver restarts blocks instead of
running under it, and the labels restored (only the ones paused, only where still paused) once the new
driver is Ready."""

from __future__ import annotations

import json
from typing import Any

from upgrader.core.model.actions import DeletePod, SetLabels
from upgrader.core.model.states import DRIVER_DELETED_AT, DRIVER_POD_UID
from upgrader.core.node.fence import PAUSED, RECORD, paused
from upgrader.core.report.kinds import BlockKind

from .factories import NEW, OLD, T0, at, driver_pod, gpu_pod, node, pod, run_step, snapshot, validator
from .steps_fixtures import S

UNGUARDED = "; the node has no GPU Operator operand label to pause: nothing keeps a new GPU pod off it meanwhile"
PLUGIN, VALIDATOR, DCGM = (f"nvidia.com/gpu.deploy.{o}" for o in ("device-plugin", "operator-validator", "dcgm"))
OPERANDS = {PLUGIN: "true", VALIDATOR: "true", DCGM: "false", "nvidia.com/gpu.deploy.driver": "true"}
PAUSED_BY_US = {PLUGIN: "true", VALIDATOR: "true"}  # dcgm "false" stays, the driver's own label is not an operand's


def plugin(name: str = "nvidia-device-plugin-n1", **kw: Any) -> Any:
    app = {"app": "nvidia-device-plugin-daemonset"}
    return pod(name, namespace="gpu-operator", labels=app, owner="DaemonSet", **kw)


def restarting(*pods: Any, state: Any = S.POD_RESTART_REQUIRED, **annotations: str) -> Any:
    view = node(state=state, since=0, unschedulable=True, labels=OPERANDS,
                annotations={DRIVER_POD_UID: "driver-old", **annotations})
    return snapshot([view], list(pods))


def test_the_operands_are_paused_and_recorded_before_the_driver_pod_is_deleted() -> None:
    old = driver_pod(revision=OLD, uid="driver-old")
    plan, _ = run_step(restarting(old, validator()), now=T0 + 2)
    assert plan.attempts == [SetLabels("n1", {PLUGIN: PAUSED, VALIDATOR: PAUSED},
                                       {RECORD: json.dumps(PAUSED_BY_US, sort_keys=True)}, PAUSED_BY_US)]
    assert plan.waiting == (
        "pausing the GPU Operator's operands (nvidia.com/gpu.deploy.device-plugin, "
        "nvidia.com/gpu.deploy.operator-validator): no new GPU pod is admitted during the restart")


def test_the_delete_waits_until_the_paused_operands_have_left_then_goes_on_pods_read_after() -> None:
    old = driver_pod(revision=OLD, uid="driver-old")
    fenced = {RECORD: json.dumps(PAUSED_BY_US)}
    plan, _ = run_step(restarting(old, validator(), plugin(terminating=True), **fenced), now=T0 + 3)
    assert plan.attempts == []
    assert plan.waiting == ("waiting for the paused operands to leave the node: gpu-operator/nvidia-device-"
                            "plugin-n1, gpu-operator/nvidia-operator-validator-n1")
    plan, _ = run_step(restarting(old, **fenced), now=T0 + 4)
    assert plan.attempts == [DeletePod("n1", "gpu-operator", "nvidia-driver-n1-rev-old", "driver-old")]
    assert plan.waiting == "restarting driver pod gpu-operator/nvidia-driver-n1-rev-old"


def test_a_gpu_user_on_the_node_after_the_delete_blocks_the_restart() -> None:
    fenced = {RECORD: json.dumps(PAUSED_BY_US), DRIVER_DELETED_AT: at(5)}
    pinned = gpu_pod("nightly-eval-x", owner="Job")
    plan, _ = run_step(restarting(pinned, **fenced), now=T0 + 6)
    assert plan.blocked is not None and plan.blocked.kind is BlockKind.GPU_PODS
    assert plan.blocked.reason == ("1 pod on the node during the driver restart holds GPUs: default/nightly-eval-x; "
                                   "the driver cannot unload under them")


def test_the_labels_paused_come_back_once_the_new_driver_is_ready_and_others_are_left_alone() -> None:
    # device-plugin set back already (k8s-driver-manager restores what it finds paused); validator still ours.
    fenced = {RECORD: json.dumps(PAUSED_BY_US), DRIVER_DELETED_AT: at(5)}
    view = node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True,
                labels={**OPERANDS, PLUGIN: "true", VALIDATOR: PAUSED}, annotations=fenced)
    plan, _ = run_step(snapshot([view], [driver_pod(revision=NEW, ready=True)]), now=T0 + 9)
    assert plan.attempts == [SetLabels("n1", {VALIDATOR: "true"}, {RECORD: None}, {VALIDATOR: PAUSED})]
    assert plan.trigger == "driver_restarted"


def test_a_node_with_no_operand_label_is_restarted_at_once_and_says_it_is_unguarded() -> None:
    view = node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True, annotations={DRIVER_POD_UID: "driver-old"})
    plan, _ = run_step(snapshot([view], [driver_pod(revision=OLD, uid="driver-old")]), now=T0 + 2)
    assert plan.attempts == [DeletePod("n1", "gpu-operator", "nvidia-driver-n1-rev-old", "driver-old")]
    assert plan.waiting == "restarting driver pod gpu-operator/nvidia-driver-n1-rev-old" + UNGUARDED


def test_paused_values_are_k8s_driver_managers() -> None:
    assert [paused(v) for v in ("true", "false", "", PAUSED, "pre-installed")] == [
        PAUSED, "false", "", PAUSED, f"pre-installed_{PAUSED}"]
