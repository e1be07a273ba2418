"""Every scenario end to end: the controller over HTTP against the emulator, judged by outcomes; on the
emulator's virtual clock, the controller's passes a virtual second apart (conftest `rollout(..., virtual=True)`),
so the waits and timeouts cost no wall time."""

from __future__ import annotations

import json
from typing import Any

import pytest

from upgrader.commands.cli import main
from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    FAILED_AT,
    FAILED_KIND,
    FAILED_REASON,
    STATE_LABEL,
    State,
)

from .conftest import FAST_POLICY, Rollout


def status_json(r: Rollout, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The status as `upgrader status -o json` shows it once `run_until` has stopped the controller:
    the last status on stdout, and exit 1 with a line saying no controller runs (it released the Lease)."""
    capsys.readouterr()
    assert main(["status", "-o", "json", "--kubeconfig", str(r.kubeconfig)]) == 1
    out, err = capsys.readouterr()
    assert "upgrader: no controller is running: Lease gpu-operator/gpu-driver-upgrader has no holder" in err
    status: dict[str, Any] = json.loads(out)
    assert status["controller"]["alive"] is False
    return status


def test_healthy_rollout_finishes_with_every_promise_kept(
    rollout: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    r.run_until(("Done",), timeout=90)
    for name in r.info.nodes:
        node = r.node(name)
        assert node["metadata"]["labels"][STATE_LABEL] == State.DONE.value
        assert not node["spec"].get("unschedulable"), f"{name} left cordoned"
        assert node["metadata"]["labels"]["nvidia.com/cuda.driver.major"] == "550"
    pods = r.cluster.store.objects(r.cluster.type("pods"), "gpu-operator")
    drivers = {
        p["spec"]["nodeName"]: p
        for p in pods
        if p["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"
    }
    for ds_name in r.info.driver_daemonsets:
        ds = r.cluster.get("daemonsets", ds_name, "gpu-operator", "apps")
        assert ds is not None
        newest = r.cluster.daemonsets.newest_revision(ds)["metadata"]["labels"]["controller-revision-hash"]
        for pod in drivers.values():
            if pod["metadata"]["ownerReferences"][0]["name"] == ds_name:
                assert pod["metadata"]["labels"]["controller-revision-hash"] == newest
    assert set(drivers) == set(r.info.nodes)
    violations = r.recorder.check(
        r.policy, r.domain_of, "us-east-1a", ["us-east-1a", "us-east-1b", "us-east-1c"]
    )
    assert violations == []
    assert r.cluster.daemonsets.incidents == [], "a driver restarted under running GPU pods"
    status = status_json(r, capsys)
    assert status["phase"] == "Done"
    assert status["nodes_by_state"] == {s.value: (6 if s is State.DONE else 0) for s in State} | {"unlabelled": 0}
    assert status["blocked"] == []


def test_history_shows_the_budgets_were_used_not_just_respected(rollout: Any) -> None:
    """The checks above cannot pass vacuously: two nodes did run at once, domain by domain."""
    r: Rollout = rollout("healthy", virtual=True)
    r.run_until(("Done",), timeout=90)
    starts = r.recorder.starts()
    assert len(starts) == 6
    assert [r.domain_of[s.node] for s in starts] == ["us-east-1a"] * 2 + ["us-east-1b"] * 2 + [
        "us-east-1c"
    ] * 2
    evictions = [q for q in r.cluster.requests if q.subresource == "eviction"]
    assert evictions and all(q.method == "POST" for q in evictions)


def _assert_halted(
    r: Rollout,
    capsys: pytest.CaptureFixture[str],
    node: str,
    state: str,
    kind: str,
    words: list[str],
    blocked: bool,
) -> dict[str, Any]:
    status = status_json(r, capsys)
    assert status["phase"] == "Halted"
    entries = status["blocked"] if blocked else status["failed"]
    entry = next(e for e in entries if e["node"] == node)
    for word in words:
        assert word in entry["reason"], (word, entry["reason"])
        assert word in status["message"]
    assert entry["since"]
    assert node in status["halt_reason"]
    annotations = r.node(node)["metadata"]["annotations"]
    if blocked:
        assert entry["state"] == state
        assert annotations[BLOCKED_KIND] == kind and annotations[BLOCKED_REASON] == entry["reason"]
        assert annotations[BLOCKED_SINCE] == entry["since"]
    else:
        assert r.node(node)["metadata"]["labels"][STATE_LABEL] == State.FAILED.value
        assert annotations[FAILED_KIND] == kind and annotations[FAILED_REASON] == entry["reason"]
    messages = [e["message"] for e in r.events_for(node)]
    assert any(words[0] in m for m in messages), messages
    assert r.recorder.check(r.policy, r.domain_of, "us-east-1a") == []
    return status


def test_pdb_blocked_rollout_halts_naming_the_budget(
    rollout: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    r: Rollout = rollout("pdb-blocked", virtual=True)
    r.run_until(("Halted",), timeout=60, hold=1.0)
    node = r.info.blocked_node
    assert node is not None
    _assert_halted(
        r,
        capsys,
        node,
        State.POD_DELETION_REQUIRED.value,
        "pdb",
        ["ml-training/critical-finetune", "disruptionsAllowed=0", "ml-training/critical-finetune-0"],
        blocked=True,
    )
    refused = [q for q in r.cluster.requests if q.subresource == "eviction" and q.status == 429]
    assert "critical-finetune-0" in {q.name for q in refused}
    assert r.cluster.get("pods", "critical-finetune-0", "ml-training") is not None
    assert all(
        r.node(n)["metadata"]["labels"][STATE_LABEL] == State.UPGRADE_REQUIRED.value
        for n in r.info.nodes
        if r.domain_of[n] != "us-east-1a"
    )


def test_stuck_job_halts_after_the_wait_timeout(rollout: Any, capsys: pytest.CaptureFixture[str]) -> None:
    r: Rollout = rollout("stuck-job", virtual=True)
    r.run_until(("Halted",), timeout=60, hold=0.5)
    node = r.info.stuck_job_node
    assert node is not None
    status = _assert_halted(
        r,
        capsys,
        node,
        State.WAIT_FOR_JOBS_REQUIRED.value,
        "wait-for-jobs",
        ["batch/stuck-eval-", "past the 4s timeout"],
        blocked=True,
    )
    assert "app=batch-eval" in status["message"]


def test_missing_image_fails_the_node_and_halts_the_canary(
    rollout: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    r: Rollout = rollout("missing-image", virtual=True)
    r.run_until(("Halted",), timeout=60, hold=0.5)
    node = r.info.missing_image_node
    assert node is not None
    status = _assert_halted(
        r,
        capsys,
        node,
        State.POD_RESTART_REQUIRED.value,
        "image",
        ["ImagePullBackOff", "550-5.15.0-119-generic-ubuntu22.04"],
        blocked=False,
    )
    assert "canary domain us-east-1a" in status["halt_reason"]
    assert r.node(node)["spec"].get("unschedulable"), "a failed node stays cordoned"


def test_validation_failure_fails_the_node(rollout: Any, capsys: pytest.CaptureFixture[str]) -> None:
    r: Rollout = rollout("validation-failure", virtual=True)
    r.run_until(("Halted",), timeout=60, hold=0.5)
    node = r.info.broken_validation_node
    assert node is not None
    _assert_halted(
        r,
        capsys,
        node,
        State.VALIDATION_REQUIRED.value,
        "validation",
        ["validator pod", "nvidia.com/gpu allocatable 0, expected 8"],
        blocked=False,
    )


def test_operator_fixes_the_pdb_and_the_rollout_continues(rollout: Any) -> None:
    r: Rollout = rollout("pdb-blocked", virtual=True)
    r.run_until(("Halted",), timeout=60, hold=0.5)
    pdbs = r.cluster.type("poddisruptionbudgets", "policy")
    r.cluster.store.patch(
        pdbs,
        "ml-training",
        "critical-finetune",
        "application/merge-patch+json",
        {"spec": {"minAvailable": 0}},
    )
    r.run_until(("Done",), timeout=90)
    assert r.recorder.check(r.policy, r.domain_of, "us-east-1a") == []


def test_resume_is_not_acknowledgement_and_acknowledge_names_the_canary_failure(
    rollout: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    r: Rollout = rollout("validation-failure", virtual=True)
    r.run_until(("Halted",), timeout=60, hold=0.5)
    broken = r.info.broken_validation_node
    assert broken is not None
    capsys.readouterr()
    assert main(["resume", "--kubeconfig", str(r.kubeconfig)]) == 0
    out = capsys.readouterr().out
    assert out == (
        "resumed: new nodes may start; failures are not acknowledged by resume\n"
        f"still upgrade-failed, not acknowledged: {broken} (`upgrader acknowledge <node>`)\n"
    )
    status = r.run_until(("Halted",), timeout=30, hold=1.0)
    assert status["failed"][0]["node"] == broken and not status["failed"][0]["acknowledged"]
    outside = [n for z, nodes in r.info.domains.items() if z != "us-east-1a" for n in nodes]
    assert not [s for s in r.recorder.starts() if s.node in outside], "no node outside the canary starts"
    failed_at = r.node(broken)["metadata"]["annotations"][FAILED_AT]
    assert main(["acknowledge", "--kubeconfig", str(r.kubeconfig), broken]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"acknowledged {broken}: upgrade-failed in validation-required at {failed_at}: ")
    control = r.cluster.get("configmaps", "gpu-driver-upgrade-control", "gpu-operator")
    assert control is not None and json.loads(control["data"]["acknowledged"]) == {broken: failed_at}
    status = r.run_until(("Done",), timeout=90)
    assert status["nodes_by_state"][State.FAILED.value] == 1
    assert status["failed"][0]["node"] == broken and status["failed"][0]["acknowledged"]
    assert r.recorder.check(r.policy, r.domain_of, "us-east-1a", failures_acknowledged=True) == []


def test_pause_stops_new_starts_and_resume_continues(
    rollout: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    # pause changes the status a controller wrote: before any ran it refuses and writes nothing
    assert main(["pause", "--kubeconfig", str(r.kubeconfig)]) == 1
    assert r.cluster.get("configmaps", "gpu-driver-upgrade-status", "gpu-operator") is None
    r.run_until(("Running",), timeout=30)
    started = len(r.recorder.starts())
    assert main(["pause", "--kubeconfig", str(r.kubeconfig)]) == 0
    status = r.run_until(("Paused",), timeout=30, hold=1.0)
    assert len(r.recorder.starts()) == started, "no new starts while paused"
    assert status["nodes_by_state"][State.UPGRADE_REQUIRED.value] == 6 - started
    assert main(["resume", "--kubeconfig", str(r.kubeconfig)]) == 0
    r.run_until(("Done",), timeout=90)


def test_policy_choice_fail_instead_of_halt(rollout: Any) -> None:
    policy = {
        **FAST_POLICY,
        "onBlockedTimeout": "fail",
        "onNodeFailure": "continue",
        "failureDomains": {"canary": "us-east-1b", "soakSeconds": 0},
    }
    r: Rollout = rollout("stuck-job", policy, virtual=True)
    status = r.run_until(("Done",), timeout=90)
    node = r.info.stuck_job_node
    assert node is not None
    assert status["nodes_by_state"][State.FAILED.value] == 1
    assert r.node(node)["metadata"]["labels"][STATE_LABEL] == State.FAILED.value
    assert "not done within the 4s timeout" in r.node(node)["metadata"]["annotations"][FAILED_REASON]
