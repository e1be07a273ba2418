"""A rollout driven only through kubectl and the DriverRollout object, on a virtual clock: `kubectl
apply` of the CRD and the object, `kubectl patch` mid-rollout (budget raised, paused, resumed),
`kubectl get` showing progress in the printer columns, and `kubectl wait --for=condition=Complete`
returning when the last node is done and not before. The controller is `run --rollout`'s
(controller/runner.py attach_rollout), stepped pass by pass."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from upgrader.controller.runner import attach_rollout, build_controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import IN_PROGRESS, State
from upgrader.core.policy.policy import Policy
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder

pytestmark = pytest.mark.kubectl
ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
SPEC = {"maxParallelUpgrades": 1, "maxUnavailable": "50%", "failureDomains": {"canary": "us-east-1a"}}
ACTIVE = {s.value for s in IN_PROGRESS}


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.base = [str(KUBECTL), "--kubeconfig", str(kubeconfig)]

    def __call__(self, *args: str) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def background(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*self.base, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _in_progress_at_most(recorder: RolloutRecorder) -> int:
    state: dict[str, str | None] = {}
    most = 0
    for r in recorder.records:
        state[r.node] = r.state
        most = max(most, sum(1 for s in state.values() if s in ACTIVE))
    return most


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed (not on PATH)")
def test_kubectl_applies_patches_gets_and_waits_for_a_rollout(tmp_path: Path) -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    url = cluster.serve()
    kubectl = Kubectl(cluster.write_kubeconfig(tmp_path / "kubeconfig"))
    try:
        kubectl("apply", "-f", str(ROOT / "deploy" / "crd.yaml"))
        kubectl("wait", "--for=condition=Established", "crd/driverrollouts.gpu-upgrader.io", "--timeout=30s")
        rollout = yaml.safe_load((ROOT / "deploy" / "rollout.yaml").read_text())
        (tmp_path / "rollout.yaml").write_text(yaml.safe_dump({**rollout, "spec": SPEC}))
        kubectl("apply", "-f", str(tmp_path / "rollout.yaml"))
        waiting = kubectl.background("wait", "--for=condition=Complete", "driverrollout/default", "--timeout=300s")

        recorder = RolloutRecorder(cluster, rollout="default")
        settings = Settings(identity="kubectl-e2e")
        controller = build_controller(k8s.ApiClient(k8s.Configuration(host=url)), Policy(), settings)
        attach_rollout(controller, "default")
        rtype = cluster.type("driverrollouts", "gpu-upgrader.io", "v1alpha1")

        def status() -> dict[str, Any]:
            return dict(cluster.store.get(rtype, None, "default").get("status") or {})

        def step(passes: int, until: str | None = None) -> None:
            for _ in range(passes):
                controller.reconcile()
                if status().get("phase") == until:
                    return
                assert waiting.poll() is None, f"kubectl wait returned before Complete: {status().get('phase')}"
                cluster.advance(1)

        step(15)
        assert _in_progress_at_most(recorder) == 1 and status()["currentDomain"] == "us-east-1a"
        table = kubectl("get", "driverrollouts")
        assert table.split("\n")[0].split() == ["NAME", "PHASE", "DONE", "BLOCKED", "DOMAIN", "AGE"]
        row = table.split("\n")[1].split()
        assert row[:2] == ["default", "Running"] and row[4] == "us-east-1a", table

        kubectl("patch", "driverrollout", "default", "--type", "merge", "-p", '{"spec":{"maxParallelUpgrades":2}}')
        step(25)
        assert _in_progress_at_most(recorder) == 2, "the raised budget took effect without a restart"

        kubectl("patch", "driverrollout", "default", "--type", "merge", "-p", '{"spec":{"paused":true}}')
        step(2)
        started = len(recorder.starts())
        step(30)
        assert len(recorder.starts()) == started, "no node starts while spec.paused"
        paused = json.loads(kubectl("get", "driverrollout", "default", "-o", "json"))["status"]
        assert paused["phase"] == "Paused"
        assert {c["type"]: c["status"] for c in paused["conditions"]}["Paused"] == "True"

        kubectl("patch", "driverrollout", "default", "--type", "merge", "-p", '{"spec":{"paused":false}}')
        step(400, until="Done")
        assert status()["phase"] == "Done" and status()["progress"] == "6/6"
        out, err = waiting.communicate(timeout=30)
        assert (waiting.returncode, out) == (0, "driverrollout.gpu-upgrader.io/default condition met\n"), err
        row = kubectl("get", "driverrollouts").split("\n")[1].split()
        assert row[:4] == ["default", "Done", "6/6", "0"], row
        assert set(recorder.final_states().values()) == {State.DONE.value}
        domains = {n: z for z, nodes in info.domains.items() for n in nodes}
        assert recorder.check(controller.policy, domains, "us-east-1a") == []
    finally:
        cluster.stop()
