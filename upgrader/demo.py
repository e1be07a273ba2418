"""`upgrader demo`: the emulator and the controller in one process, with live progress.

Exit 0 when every node is upgrade-done; 1 when the rollout halts (and stays halted for
`halt_grace` seconds, so a momentary PDB refusal does not end it) or the time runs out.
"""

from __future__ import annotations

import threading
import time
from typing import Any, TextIO

from kubernetes import client as k8s

from upgrader.config import Settings
from upgrader.controller import PassReport
from upgrader.core.policy import Policy, policy_from_mapping
from upgrader.runner import build_controller, start_watches
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleet_builders import NEW_DRIVER, OLD_DRIVER
from upgrader.sim.scenarios import build
from upgrader.statusview import progress_line, render_table

# Short timeouts so every scenario reaches its end within a minute.
DEMO_POLICY: dict[str, Any] = {
    "maxParallelUpgrades": 2,
    "maxUnavailable": "50%",
    "failureDomains": {"canary": "us-east-1a", "soakSeconds": 3},
    "waitForCompletion": {"podSelector": "app=batch-eval", "timeoutSeconds": 20},
    "gpuPodDeletion": {"timeoutSeconds": 20},
    "podRestart": {"timeoutSeconds": 15},
    "validation": {"timeoutSeconds": 15},
}


def demo_policy() -> Policy:
    return policy_from_mapping(DEMO_POLICY)


class _Latest:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.status: dict[str, Any] = {}

    def update(self, report: PassReport) -> None:
        if report.status:
            with self.lock:
                self.status = report.status

    def get(self) -> dict[str, Any]:
        with self.lock:
            return dict(self.status)


def run_demo(
    scenario: str,
    nodes: int,
    policy: Policy | None,
    out: TextIO,
    timeout: float = 240.0,
    halt_grace: float = 6.0,
) -> int:
    cluster = EmulatedCluster()
    info = build(cluster, scenario, nodes)
    url = cluster.serve()
    zones = ", ".join(f"{z} ({len(n)})" for z, n in info.domains.items())
    print(
        f"emulated cluster '{scenario}' at {url}: {len(info.nodes)} GPU nodes in {zones}; "
        f"driver {OLD_DRIVER} -> {NEW_DRIVER}",
        file=out,
        flush=True,
    )
    for note in info.notes:
        print(f"note: {note}", file=out, flush=True)
    settings = Settings(requeue_seconds=0.5, identity="upgrader-demo", lease_duration_seconds=5)
    controller = build_controller(
        k8s.ApiClient(k8s.Configuration(host=url)), policy or demo_policy(), settings
    )
    latest = _Latest()
    controller.on_pass.append(latest.update)
    stop, wake = threading.Event(), threading.Event()
    start_watches(controller, stop, wake)
    loop = threading.Thread(target=controller.run, args=(stop, wake), name="controller", daemon=True)
    loop.start()
    started = time.monotonic()
    code = _watch(latest, out, started, timeout, halt_grace)
    stop.set()
    wake.set()
    loop.join(timeout=10)
    cluster.stop()
    status = latest.get()
    print("", file=out)
    print(render_table(status) if status else "no status was produced", file=out)
    refused = sum(1 for r in cluster.requests if r.subresource == "eviction" and r.status == 429)
    print(
        f"\n{len(cluster.requests)} API requests, {refused} evictions refused by a PodDisruptionBudget, "
        f"{time.monotonic() - started:.1f}s",
        file=out,
    )
    verdict = {0: "every node is upgrade-done", 1: "the rollout did not finish"}[code]
    print(f"demo result: {verdict}", file=out, flush=True)
    return code


def _watch(latest: _Latest, out: TextIO, started: float, timeout: float, halt_grace: float) -> int:
    last_line, reasons_seen = "", set()
    halted_since: float | None = None
    while time.monotonic() - started < timeout:
        time.sleep(0.25)
        status = latest.get()
        if not status:
            continue
        elapsed = time.monotonic() - started
        line = progress_line(status)
        if line != last_line:
            print(progress_line(status, elapsed), file=out, flush=True)
            last_line = line
        for entry in (status.get("blocked") or []) + (status.get("failed") or []):
            reason = f"{entry['node']}: {entry['reason']}"
            if reason not in reasons_seen:
                reasons_seen.add(reason)
                kind = "blocked" if entry in (status.get("blocked") or []) else "failed"
                print(f"           {kind} {reason}", file=out, flush=True)
        total = status.get("nodes_total", 0)
        if status.get("phase") == "Done":
            return 0 if status["nodes_by_state"].get("upgrade-done") == total else 1
        if status.get("phase") == "Halted":
            halted_since = halted_since or time.monotonic()
            if time.monotonic() - halted_since >= halt_grace:
                return 1
        else:
            halted_since = None
    print(f"timed out after {timeout:.0f}s", file=out, flush=True)
    return 1
