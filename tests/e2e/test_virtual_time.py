"""Timeouts, measured on a virtual clock: the controller in-process, the emulator without HTTP."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from tests.shown import shown
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import BLOCKED_SINCE, FAILED_AT, FAILED_REASON, STATE_LABEL, State
from upgrader.core.model.timefmt import parse_rfc3339, rfc3339
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import DRIVER_REPO, NEW_DRIVER, UNBUILT_KERNEL, build, driver_tag
from upgrader.sim.proving.invariants import RolloutRecorder


def virtual(scenario: str, policy: dict[str, Any]) -> tuple[EmulatedCluster, Controller, RolloutRecorder, Any]:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, scenario)
    recorder = RolloutRecorder(cluster)
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy_from_mapping(policy), Settings(identity="virtual"), cluster.store.clock.now)
    return cluster, controller, recorder, info


def run(cluster: EmulatedCluster, controller: Controller, seconds: float, step: float = 1.0) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for _ in range(int(seconds / step)):
        status = shown(controller.reconcile().status)
        cluster.advance(step)
    return status


def entered(recorder: RolloutRecorder, node: str, state: State) -> float:
    return next(r.time for r in recorder.records if r.node == node and r.state == state.value)


def test_wait_for_jobs_times_out_exactly_on_its_timeout() -> None:
    cluster, ctl, rec, info = virtual(
        "stuck-job", {"waitForCompletion": {"podSelector": "app=batch-eval", "timeoutSeconds": 120}}
    )
    node = info.stuck_job_node
    status = run(cluster, ctl, 100)
    assert status["phase"] == "Running"
    assert any(w["node"] == node and "stuck-eval" in w["reason"] for w in status["waiting"])
    start = entered(rec, node, State.WAIT_FOR_JOBS_REQUIRED)
    status = run(cluster, ctl, 40)
    assert status["phase"] == "Halted"
    annotations = cluster.get("nodes", node)["metadata"]["annotations"]
    assert annotations[BLOCKED_SINCE] == rfc3339(start), "since when: the wait's start, not the timeout"
    halted_at = next(r.time for r in rec.records if r.node == node and r.blocked)
    assert 120 <= halted_at - start < 121


def test_driver_restart_timeout_fails_the_node_on_time() -> None:
    cluster, ctl, rec, info = virtual("missing-image", {"podRestart": {"timeoutSeconds": 600}})
    node = info.missing_image_node
    old = {name for p in cluster.store.pods_on(node) if (name := p["metadata"]["name"]).startswith("nvidia-driver")}
    run(cluster, ctl, 590)
    assert cluster.get("nodes", node)["metadata"]["labels"][STATE_LABEL] == State.POD_RESTART_REQUIRED.value
    status = run(cluster, ctl, 40)
    meta = cluster.get("nodes", node)["metadata"]
    assert meta["labels"][STATE_LABEL] == State.FAILED.value
    # The restart's timeout counts from the driver pod's deletion (docs/policy.md), which comes a few seconds
    # after the node enters pod-restart-required: once the operands it pauses have left (the admission guard).
    deleted = next(r.time for r in cluster.requests if r.verb == "delete" and r.name in old)
    assert 0 < deleted - entered(rec, node, State.POD_RESTART_REQUIRED) < 10
    failed_after = parse_rfc3339(meta["annotations"][FAILED_AT]) - deleted
    assert 600 <= failed_after < 602
    assert "ImagePullBackOff" in meta["annotations"][FAILED_REASON]
    assert status["phase"] == "Halted"


def test_pdb_block_past_timeout_fails_the_node_when_the_policy_says_so() -> None:
    policy = {"gpuPodDeletion": {"timeoutSeconds": 300}, "onBlockedTimeout": "fail"}
    cluster, ctl, rec, info = virtual("pdb-blocked", policy)
    node = info.blocked_node
    status = run(cluster, ctl, 200)
    assert status["phase"] == "Halted" and status["blocked"][0]["node"] == node
    status = run(cluster, ctl, 120)
    meta = cluster.get("nodes", node)["metadata"]
    assert meta["labels"][STATE_LABEL] == State.FAILED.value
    assert "blocked past the 300s timeout" in meta["annotations"][FAILED_REASON]
    assert "ml-training/critical-finetune" in meta["annotations"][FAILED_REASON]
    waited = parse_rfc3339(meta["annotations"][FAILED_AT]) - entered(rec, node, State.POD_DELETION_REQUIRED)
    assert 300 <= waited < 302
    assert cluster.get("pods", "critical-finetune-0", "ml-training") is not None, "the PDB was never bypassed"


def test_validation_timeout_lists_what_failed() -> None:
    cluster, ctl, rec, info = virtual("validation-failure", {"validation": {"timeoutSeconds": 60}})
    node = info.broken_validation_node
    run(cluster, ctl, 120)
    meta = cluster.get("nodes", node)["metadata"]
    assert meta["labels"][STATE_LABEL] == State.FAILED.value
    reason = meta["annotations"][FAILED_REASON]
    assert reason.startswith("not done within the 60s timeout: ")
    assert "validator pod gpu-operator/nvidia-operator-validator-" in reason
    assert "nvidia.com/gpu allocatable 0, expected 8" in reason
    waited = parse_rfc3339(meta["annotations"][FAILED_AT]) - entered(rec, node, State.VALIDATION_REQUIRED)
    assert 60 <= waited < 62


def relabel(cluster: EmulatedCluster, node: str, state: State) -> None:
    cluster.store.patch(
        cluster.type("nodes"),
        None,
        node,
        "application/merge-patch+json",
        {"metadata": {"labels": {STATE_LABEL: state.value}}},
    )


def test_retrying_a_failed_node_runs_the_whole_cycle_again() -> None:
    """A relabel must not declare a node done because its (broken) driver pod is 'current'."""
    cluster, ctl, _, info = virtual(
        "missing-image", {"podRestart": {"timeoutSeconds": 60}, "onNodeFailure": "continue"}
    )
    node = info.missing_image_node
    run(cluster, ctl, 90)
    assert cluster.get("nodes", node)["metadata"]["labels"][STATE_LABEL] == State.FAILED.value
    relabel(cluster, node, State.UPGRADE_REQUIRED)  # retry without fixing anything
    run(cluster, ctl, 120)
    meta = cluster.get("nodes", node)["metadata"]
    assert meta["labels"][STATE_LABEL] == State.FAILED.value, "still broken: it must fail again, not pass"
    cluster.settings.registry[DRIVER_REPO].add(driver_tag(NEW_DRIVER, UNBUILT_KERNEL))  # the image is built
    relabel(cluster, node, State.UPGRADE_REQUIRED)
    run(cluster, ctl, 120)
    node_obj = cluster.get("nodes", node)
    assert node_obj["metadata"]["labels"][STATE_LABEL] == State.DONE.value
    assert node_obj["metadata"]["labels"]["nvidia.com/cuda.driver.major"] == "550"
    assert not node_obj["spec"].get("unschedulable")
    assert FAILED_REASON not in node_obj["metadata"].get("annotations", {})


def driver_revisions(cluster: EmulatedCluster) -> tuple[dict[str, str], set[str]]:
    """Each node's driver pod revision hash, and the newest revision hash of every driver DaemonSet."""
    pods = cluster.store.objects(cluster.type("pods"), "gpu-operator")
    running = {
        p["spec"]["nodeName"]: p["metadata"]["labels"]["controller-revision-hash"]
        for p in pods
        if p["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"
        and not p["metadata"].get("deletionTimestamp")
    }
    newest = {
        cluster.daemonsets.newest_revision(ds)["metadata"]["labels"]["controller-revision-hash"]
        for ds in cluster.store.objects(cluster.type("daemonsets", "apps"), "gpu-operator")
        if ds["metadata"]["name"].startswith("nvidia-driver-daemonset")
    }
    return running, newest


def test_a_driver_released_while_a_node_validates_is_rolled_onto_it() -> None:
    """A hotfix build of the driver lands while the canary node is in validation-required: the
    node restarts its driver again instead of timing out, and the rollout ends on the hotfix."""
    policy = {"validation": {"timeoutSeconds": 120}, "maxParallelUpgrades": 2}
    cluster, ctl, rec, info = virtual("healthy", policy)
    for _ in range(300):
        ctl.reconcile()
        cluster.advance(1)
        validating = [r.node for r in rec.records if r.state == State.VALIDATION_REQUIRED.value]
        if validating:
            break
    node = validating[0]
    assert cluster.get("nodes", node)["metadata"]["labels"][STATE_LABEL] == State.VALIDATION_REQUIRED.value
    ds_type = cluster.type("daemonsets", "apps")
    hotfix = {"name": "DRIVER_BUILD", "value": "hotfix-1"}
    for name in info.driver_daemonsets:
        ds = cluster.get("daemonsets", name, "gpu-operator", "apps")
        containers = copy.deepcopy(ds["spec"]["template"]["spec"]["containers"])
        containers[0]["env"].append(hotfix)
        patch = {"spec": {"template": {"spec": {"containers": containers}}}}
        cluster.store.patch(ds_type, "gpu-operator", name, "application/merge-patch+json", patch)
    status = run(cluster, ctl, 600)
    assert status["phase"] == "Done", status["message"]
    states = [r.state for r in rec.records if r.node == node]
    back = (State.VALIDATION_REQUIRED.value, State.POD_RESTART_REQUIRED.value)
    assert back in itertools.pairwise(states), f"{node} went {states}"
    running, newest = driver_revisions(cluster)
    assert set(running) == set(info.nodes)
    assert set(running.values()) <= newest, "every node ends on the hotfix revision"
    for name in info.nodes:
        meta = cluster.get("nodes", name)["metadata"]
        assert meta["labels"][STATE_LABEL] == State.DONE.value, meta["annotations"].get(FAILED_REASON)
    domain_of = {n: z for z, nodes in info.domains.items() for n in nodes}
    assert rec.check(ctl.policy, domain_of, None) == []
    assert cluster.daemonsets.incidents == []
