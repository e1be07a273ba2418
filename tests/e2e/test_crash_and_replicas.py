"""The controller as a real process: killed with SIGKILL mid-rollout, and two replicas at once."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from upgrader.core.states import STATE_LABEL, State

from .conftest import FAST_POLICY, Rollout


def _spawn(r: Rollout, policy_file: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "UPGRADER_REQUEUE_SECONDS": "0.1", "UPGRADER_LEASE_DURATION_SECONDS": "1"}
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "upgrader.cli",
                "run",
                "--kubeconfig",
                str(r.kubeconfig),
                "--policy",
                str(policy_file),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _phase(r: Rollout) -> str | None:
    cm = r.cluster.get("configmaps", "gpu-driver-upgrade-status", "gpu-operator")
    return (cm or {}).get("data", {}).get("phase")


def _wait_phase(r: Rollout, phase: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _phase(r) == phase:
            return
        time.sleep(0.1)
    raise AssertionError(f"phase {phase} not reached, last {_phase(r)}")


def _policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(FAST_POLICY))
    return path


def _writers(r: Rollout) -> list[str]:
    """The identity (from the User-Agent) behind each write to nodes and pods, in order."""
    out = []
    for req in r.cluster.requests:
        if req.verb in ("create", "patch", "update", "delete") and req.resource in ("nodes", "pods"):
            out.append(req.user_agent)
    return out


def test_sigkill_mid_rollout_then_restart_finishes(rollout: Any, tmp_path: Path) -> None:
    r: Rollout = rollout("healthy")
    policy = _policy_file(tmp_path)
    log = tmp_path / "controller.log"
    rng = random.Random(20261129)
    kills = 0
    proc = _spawn(r, policy, log)
    try:
        for _ in range(5):
            time.sleep(rng.uniform(0.8, 2.5))
            if _phase(r) == "Done":
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            kills += 1
            proc = _spawn(r, policy, log)
        _wait_phase(r, "Done", timeout=90)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    assert kills >= 3, "the rollout finished before the controller was killed enough to prove anything"
    assert proc.returncode == 0, log.read_text()[-2000:]
    assert "Traceback" not in log.read_text()
    for name in r.info.nodes:
        node = r.node(name)
        assert node["metadata"]["labels"][STATE_LABEL] == State.DONE.value
        assert not node["spec"].get("unschedulable")
    assert (
        r.recorder.check(r.policy, r.domain_of, "us-east-1a", ["us-east-1a", "us-east-1b", "us-east-1c"])
        == []
    )
    assert r.cluster.daemonsets.incidents == []
    assert len(set(_writers(r))) >= 2, "writes came from more than one controller process"


def test_two_replicas_never_both_act(rollout: Any, tmp_path: Path) -> None:
    r: Rollout = rollout("healthy")
    policy = _policy_file(tmp_path)
    first = _spawn(r, policy, tmp_path / "a.log")
    second = _spawn(r, policy, tmp_path / "b.log")
    try:
        _wait_phase(r, "Done", timeout=90)
    finally:
        for proc in (first, second):
            proc.send_signal(signal.SIGTERM)
        for proc in (first, second):
            proc.wait(timeout=15)
    assert first.returncode == 0 and second.returncode == 0
    agents = {req.user_agent for req in r.cluster.requests if req.resource == "leases"}
    assert len(agents) == 2, "both replicas were running and contending for the lease"
    writers = _writers(r)
    switches = sum(1 for a, b in itertools.pairwise(writers) if a != b)
    lease = r.cluster.get("leases", "gpu-driver-upgrader", "gpu-operator", "coordination.k8s.io")
    assert lease is not None
    transitions = int(lease["spec"].get("leaseTransitions") or 0)
    assert switches <= transitions, (switches, transitions)
    assert r.recorder.check(r.policy, r.domain_of, "us-east-1a") == []
    assert all(r.node(n)["metadata"]["labels"][STATE_LABEL] == State.DONE.value for n in r.info.nodes)
