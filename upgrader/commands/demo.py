"""`upgrader demo`: the emulator and the controller in one process, with live progress.

Exit 0 when every node is upgrade-done; 1 when the rollout halts, or waits on a person with no node
in progress (a node held by the preflight), and stays so for `halt_grace` seconds (a momentary PDB
refusal does not end it), or the time runs out; 130 on
Ctrl-C, after stopping the controller and the emulator and saying so in one line.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from kubernetes import client as k8s

from upgrader.commands.statusview import progress_line, render_table
from upgrader.controller.loop import PassReport
from upgrader.controller.runner import build_controller, check_policy_against_cluster, make_cache, start_watches
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.core.report.document import to_dict
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import NEW_DRIVER, OLD_DRIVER, OPERATOR_NS
from upgrader.sim.fleets.scenarios import LEDGER_CONFIGMAP, ScenarioInfo, build

# Short timeouts so every scenario reaches its end within a minute.
DEMO_POLICY: dict[str, Any] = {
    "maxParallelUpgrades": 2,
    "maxUnavailable": "50%",
    "failureDomains": {"canary": "us-east-1a", "soakSeconds": 3},
    "waitForCompletion": {"podSelector": "app=batch-eval", "timeoutSeconds": 20},
    "gpuPodDeletion": {"timeoutSeconds": 20},
    "podRestart": {"timeoutSeconds": 15},
    "validation": {"timeoutSeconds": 15},
    # The ledger each scenario keeps of its registry (sim/fleets/scenarios.py): a node whose image
    # is not in it is held at upgrade-required, its workloads left running (missing-image).
    "preflight": {"imageLedger": {"configMap": f"{OPERATOR_NS}/{LEDGER_CONFIGMAP}"}},
}


def demo_policy() -> Policy:
    return policy_from_mapping(DEMO_POLICY)


class _Latest:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.status: dict[str, Any] = {}

    def update(self, report: PassReport) -> None:
        if report.status is not None:
            shown = to_dict(report.status)  # the display reads what `upgrader status -o json` prints
            with self.lock:
                self.status = shown

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
    policy_path: str | None = None,
) -> int:
    cluster = EmulatedCluster()
    stop, wake, latest = threading.Event(), threading.Event(), _Latest()
    loop: threading.Thread | None = None
    started = time.monotonic()
    try:  # Ctrl-C anywhere from here stops what was started and says so
        info = build(cluster, scenario, nodes)
        url = cluster.serve()
        settings = Settings(requeue_seconds=0.5, identity="upgrader-demo", lease_duration_seconds=5)
        controller = build_controller(k8s.ApiClient(k8s.Configuration(host=url)), policy or demo_policy(), settings)
        make_cache(controller, wake)  # the check's lists seed the watch-fed copy
        check_policy_against_cluster(controller, policy_path)  # a policy that does not fit: exit 2, nothing written
        _announce(info, scenario, url, out)
        controller.on_pass.append(latest.update)
        start_watches(controller, stop, wake)
        loop = threading.Thread(target=controller.run, args=(stop, wake), name="controller", daemon=True)
        loop.start()
        started = time.monotonic()
        code = _watch(latest, out, started, timeout, halt_grace)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        _stop(stop, wake, loop, cluster)
    if code == EXIT_INTERRUPTED:
        print(INTERRUPTED, file=sys.stderr, flush=True)
        return code
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


EXIT_INTERRUPTED = 130
INTERRUPTED = "upgrader: interrupted; the controller stopped and the emulated cluster is gone"


def _announce(info: ScenarioInfo, scenario: str, url: str, out: TextIO) -> None:
    zones = ", ".join(f"{z} ({len(n)})" for z, n in info.domains.items())
    print(
        f"emulated cluster '{scenario}' at {url}: {len(info.nodes)} GPU nodes in {zones}; "
        f"driver {OLD_DRIVER} -> {NEW_DRIVER}",
        file=out,
        flush=True,
    )
    for note in info.notes:
        print(f"note: {note}", file=out, flush=True)


def _stop(
    stop: threading.Event, wake: threading.Event, loop: threading.Thread | None, cluster: EmulatedCluster
) -> None:
    """End the controller's loop (its pass in flight finishes), then the emulator. A second Ctrl-C
    meanwhile is ignored: cut short, the loop would log errors against a cluster already gone."""
    import signal

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread else None
    try:
        stop.set()
        wake.set()
        if loop is not None:
            loop.join(timeout=10)
        cluster.stop()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


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
        for kind in ("blocked", "held", "failed"):
            for entry in status.get(kind) or []:
                reason = f"{entry['node']}: {entry['reason']}"
                if reason not in reasons_seen:
                    reasons_seen.add(reason)
                    print(f"           {kind} {reason}", file=out, flush=True)
        total = status.get("nodes_total", 0)
        if status.get("phase") == "Done":
            return 0 if status["nodes_by_state"].get("upgrade-done") == total else 1
        # Halted, or waiting on what only a person ends with nothing left in progress (a held node).
        waits_on_person = bool((status.get("waiting_on") or {}).get("runbook")) and not status.get("in_progress")
        if status.get("phase") == "Halted" or waits_on_person:
            halted_since = halted_since or time.monotonic()
            if time.monotonic() - halted_since >= halt_grace:
                return 1
        else:
            halted_since = None
    print(f"timed out after {timeout:.0f}s", file=out, flush=True)
    return 1
