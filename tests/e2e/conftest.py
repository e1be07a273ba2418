"""Whole rollouts on the emulator over HTTP, with real but short timings."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.runner import build_controller, start_watches
from upgrader.controller.settings import Settings
from upgrader.core.policy import Policy, policy_from_mapping
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.scenarios import ScenarioInfo, build
from upgrader.sim.proving.invariants import RolloutRecorder

FAST_SIM = {
    "pod_recreate_delay": 0.2,
    "pod_ready_delay": 0.4,
    "image_pull_delay": 0.2,
    "validator_ready_delay": 0.2,
    "job_replace_delay": 0.2,
    "workload_ready_delay": 0.3,
    "image_pull_backoff": 0.5,
}
FAST_POLICY: dict[str, Any] = {
    "maxParallelUpgrades": 2,
    "maxUnavailable": "50%",
    "failureDomains": {"canary": "us-east-1a", "soakSeconds": 1},
    "waitForCompletion": {"podSelector": "app=batch-eval", "timeoutSeconds": 4},
    "gpuPodDeletion": {"timeoutSeconds": 4},
    "podRestart": {"timeoutSeconds": 5},
    "validation": {"timeoutSeconds": 5},
}


def fast_settings(identity: str = "e2e") -> Settings:
    return Settings(requeue_seconds=0.1, identity=identity, lease_duration_seconds=2)


@dataclass
class Rollout:
    cluster: EmulatedCluster
    info: ScenarioInfo
    recorder: RolloutRecorder
    policy: Policy
    url: str
    kubeconfig: Path
    reports: list[PassReport] = field(default_factory=list)

    @property
    def domain_of(self) -> dict[str, str]:
        return {n: z for z, nodes in self.info.domains.items() for n in nodes}

    def controller(self, identity: str = "e2e") -> Controller:
        ctl = build_controller(
            k8s.ApiClient(k8s.Configuration(host=self.url)), self.policy, fast_settings(identity)
        )
        ctl.on_pass.append(self.reports.append)
        return ctl

    def run_until(
        self,
        phases: tuple[str, ...],
        timeout: float = 60.0,
        hold: float = 0.0,
        controller: Controller | None = None,
    ) -> dict[str, Any]:
        """Run a controller until its status phase is in `phases` (for `hold` seconds)."""
        ctl = controller or self.controller()
        stop, wake = threading.Event(), threading.Event()
        start_watches(ctl, stop, wake)
        thread = threading.Thread(target=ctl.run, args=(stop, wake), daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        held_since: float | None = None
        try:
            while time.monotonic() < deadline:
                time.sleep(0.05)
                status = self.reports[-1].status if self.reports else {}
                if status.get("phase") in phases:
                    held_since = held_since or time.monotonic()
                    if time.monotonic() - held_since >= hold:
                        return status
                else:
                    held_since = None
            raise AssertionError(
                f"phase never reached {phases}; last status: "
                f"{self.reports[-1].status if self.reports else None}"
            )
        finally:
            stop.set()
            wake.set()
            thread.join(timeout=10)

    def node(self, name: str) -> dict[str, Any]:
        node = self.cluster.get("nodes", name)
        assert node is not None
        return node

    def kubectl(self, *args: str) -> str:
        """Real kubectl against the emulator: its stdout, after checking it exited 0."""
        binary = shutil.which("kubectl")
        if binary is None:
            pytest.skip("kubectl not installed (not on PATH)")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        done = subprocess.run(
            [binary, "--kubeconfig", str(self.kubeconfig), *args], capture_output=True, text=True, timeout=30, env=env
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def events_for(self, node: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.cluster.store.objects(self.cluster.type("events"))
            if e["involvedObject"]["name"] == node and e["reason"] == "GPUDriverUpgrade"
        ]


@pytest.fixture
def rollout(tmp_path: Path) -> Iterator[Any]:
    clusters: list[EmulatedCluster] = []

    def make(scenario: str, policy: dict[str, Any] | None = None, nodes: int = 6) -> Rollout:
        cluster = EmulatedCluster(settings=SimSettings(**FAST_SIM))
        clusters.append(cluster)
        info = build(cluster, scenario, nodes, job_seconds=1.5)
        recorder = RolloutRecorder(cluster)
        url = cluster.serve()
        kubeconfig = cluster.write_kubeconfig(tmp_path / f"{scenario}.kubeconfig")
        return Rollout(cluster, info, recorder, policy_from_mapping(policy or FAST_POLICY), url, kubeconfig)

    yield make
    for cluster in clusters:
        cluster.stop()
