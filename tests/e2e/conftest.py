"""Whole rollouts on the emulator over HTTP, with real but short timings, or (`virtual=True`) the same
timings on the emulator's virtual clock: passes of the controller one after another with `step` virtual
seconds between them, so waits and timeouts cost no wall time."""

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

from tests.shown import shown
from upgrader import __version__
from upgrader.controller.lifetime import Elector
from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.preflight_source import PreflightSource
from upgrader.controller.runner import build_controller, start_watches
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.scenarios import ScenarioInfo, build
from upgrader.sim.proving.invariants import RolloutRecorder

FAST_SIM: dict[str, Any] = {
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
    # On a virtual clock: the virtual seconds between two passes; None: real time, a controller thread.
    step: float | None = None

    @property
    def domain_of(self) -> dict[str, str]:
        return {n: z for z, nodes in self.info.domains.items() for n in nodes}

    @property
    def virtual(self) -> bool:
        return self.step is not None

    def controller(self, identity: str = "e2e") -> Controller:
        api_client = k8s.ApiClient(k8s.Configuration(host=self.url))
        settings = fast_settings(identity)
        if self.virtual:
            ctl = self._virtual_controller(api_client, settings)
        else:
            ctl = build_controller(api_client, self.policy, settings)
        ctl.on_pass.append(self.reports.append)
        return ctl

    def _virtual_controller(self, api_client: k8s.ApiClient, settings: Settings) -> Controller:
        """What `build_controller` builds (over HTTP, leader-elected, with the preflight), on the
        emulator's virtual clock instead of the one its answers' `Date` headers show (whole seconds),
        and retrying without sleeping (the clock does not move while it would)."""
        api_client.user_agent = f"upgrader/{__version__} ({settings.identity})"  # as build_controller
        api = KubeApi(api_client, sleep=lambda _: None)
        clock = self.cluster.store.clock.now
        elector = Elector(
            api, settings.namespace, settings.lease_name, settings.identity, settings.lease_duration_seconds, clock
        )
        return Controller(api, self.policy, settings, clock, elector, PreflightSource(api, self.policy, clock))

    def step_pass(self, controller: Controller) -> PassReport:
        """One pass of `controller`; on the virtual clock, then `step` virtual seconds for the emulator."""
        report = controller.reconcile()
        if self.step is not None:
            self.cluster.advance(self.step)
        return report

    def now(self) -> float:
        """The emulator's clock: virtual, or wall time."""
        return self.cluster.store.clock.now()

    def run_until(
        self,
        phases: tuple[str, ...],
        timeout: float = 60.0,
        hold: float = 0.0,
        controller: Controller | None = None,
    ) -> dict[str, Any]:
        """Run a controller until its status phase is in `phases` (for `hold` seconds), then stop it
        (it releases the Lease). On the virtual clock `timeout` and `hold` are virtual seconds."""
        ctl = controller or self.controller()
        if self.virtual:
            return self._run_virtual(ctl, phases, timeout, hold)
        stop, wake = threading.Event(), threading.Event()
        start_watches(ctl, stop, wake)
        thread = threading.Thread(target=ctl.run, args=(stop, wake), daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        held_since: float | None = None
        try:
            while time.monotonic() < deadline:
                time.sleep(0.05)
                status = shown(self.reports[-1].status) if self.reports else {}
                if status.get("phase") in phases:
                    held_since = held_since or time.monotonic()
                    if time.monotonic() - held_since >= hold:
                        return status
                else:
                    held_since = None
            raise AssertionError(
                f"phase never reached {phases}; last status: "
                f"{shown(self.reports[-1].status) if self.reports else None}"
            )
        finally:
            stop.set()
            wake.set()
            thread.join(timeout=10)

    def _run_virtual(self, ctl: Controller, phases: tuple[str, ...], timeout: float, hold: float) -> dict[str, Any]:
        """`run_until` on the virtual clock: passes `step` virtual seconds apart, as `Controller.run`
        would make them (its pace is a requeue, not a timer of the emulator's), and at the end the
        release of the Lease that `run` makes when it stops."""
        deadline = self.now() + timeout
        held_since: float | None = None
        status: dict[str, Any] = {}
        try:
            while self.now() < deadline:
                status = shown(self.step_pass(ctl).status) or status
                if status.get("phase") in phases:
                    held_since = self.now() if held_since is None else held_since
                    if self.now() - held_since >= hold:
                        return status
                else:
                    held_since = None
            raise AssertionError(f"phase never reached {phases} in {timeout:g} virtual s; last status: {status}")
        finally:
            if ctl.elector is not None:
                ctl.elector.release()

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

    def make(
        scenario: str, policy: dict[str, Any] | None = None, nodes: int = 6, virtual: bool = False, step: float = 1.0
    ) -> Rollout:
        """`virtual`: the emulator on a virtual clock (still served over HTTP for kubectl and the CLI),
        the controller's passes `step` virtual seconds apart (`Rollout.step_pass`)."""
        settings = SimSettings(**FAST_SIM)
        cluster = EmulatedCluster.virtual(settings=settings) if virtual else EmulatedCluster(settings=settings)
        clusters.append(cluster)
        info = build(cluster, scenario, nodes, job_seconds=1.5)
        recorder = RolloutRecorder(cluster)
        url = cluster.serve()
        kubeconfig = cluster.write_kubeconfig(tmp_path / f"{scenario}.kubeconfig")
        chosen = policy_from_mapping(policy or FAST_POLICY)
        return Rollout(cluster, info, recorder, chosen, url, kubeconfig, step=step if virtual else None)

    yield make
    for cluster in clusters:
        cluster.stop()
