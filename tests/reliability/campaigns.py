"""Crash, fault, two-replica and disturbance campaigns on the emulator, reproducible from their seed.

Every campaign runs whole rollouts and checks the invariants (`RolloutRecorder.check`, or
`check_disturbed` where people and restores disturb the rollout) on the emulator's history after
each one. The short versions run in CI; set UPGRADER_CAMPAIGN=full for the full ones, which print
their figures:

    UPGRADER_CAMPAIGN=full .venv/bin/python -m pytest tests/reliability/test_campaigns.py -s

Every controller takes its intent from the DriverRollout object `default` (`run --rollout default`,
or `attach_rollout` in process), whose spec is the campaign policy.

Here the SIGKILL, two-replica and API-fault campaigns; the world they run in is in campaign_world.py,
the disturbance campaign in disturbance_campaign.py.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from kubernetes import client as k8s

from tests.e2e.conftest import fast_settings
from upgrader.controller.runner import attach_rollout, build_controller, start_watches
from upgrader.core.policy.policy import Policy
from upgrader.sim.apiserver.faults import FaultPlan
from upgrader.sim.proving.invariants import lease_handovers, writer_switches

from .campaign_world import ROLLOUT, Figures, World, wait_for, world

LEASE_SECONDS = "1"


# ----- controller processes ----------------------------------------------------------------------

def spawn(w: World, log: Path) -> subprocess.Popen[bytes]:
    """`upgrader run --rollout default`: its policy is the object's spec, read at every pass."""
    env = {**os.environ, "UPGRADER_REQUEUE_SECONDS": "0.1", "UPGRADER_LEASE_DURATION_SECONDS": LEASE_SECONDS}
    with log.open("ab") as out:
        argv = [sys.executable, "-m", "upgrader.commands.cli", "run", "--kubeconfig", str(w.kubeconfig),
                "--rollout", ROLLOUT]
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def kill_campaign(tmp: Path, kills: int, seed: int) -> Figures:
    """SIGKILL the controller at random moments, restarting it each time, across as many rollouts
    as it takes to deliver `kills` kills; every rollout must still finish with every promise kept."""
    rng = random.Random(seed)
    figures = Figures(f"SIGKILL campaign (seed {seed})")
    started = time.monotonic()
    log = tmp / "kill.log"
    while figures.counts["kills"] < kills:
        w = world(tmp, seed=seed + figures.rollouts)
        proc = spawn(w, log)
        try:
            while not w.all_done() and figures.counts["kills"] < kills:
                if wait_for(w.all_done, rng.uniform(0.3, 2.5)):
                    break
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
                figures.counts["kills"] += 1
                proc = spawn(w, log)
            if not wait_for(w.all_done, 120):
                figures.violations.append(f"rollout {figures.rollouts}: did not finish after the kills")
            # The last controller must be up (past its imports, signal handlers set) before SIGTERM.
            wait_for(lambda w=w, proc=proc: started_requests(w, proc), 60)
            w.reported_done()
        finally:
            proc.send_signal(signal.SIGTERM)
            if proc.wait(timeout=15) != 0:
                figures.violations.append(f"rollout {figures.rollouts}: SIGTERM exit code {proc.returncode}")
            w.cluster.stop()
        if figures.counts["kills"] and len({r.user_agent for r in w.cluster.requests if r.verb == "patch"}) < 2:
            figures.violations.append(f"rollout {figures.rollouts}: writes did not come from several processes")
        figures.violations += [f"rollout {figures.rollouts}: {v}" for v in w.violations()]
        figures.counts.update(w.paths())
        figures.rollouts += 1
    text = log.read_text(errors="replace")
    if "Traceback" in text:
        excerpt = text[text.index("Traceback"):][:1500]
        figures.violations.append(f"a controller process printed a traceback:\n{excerpt}")
    figures.seconds = time.monotonic() - started
    return figures


def started_requests(w: World, proc: subprocess.Popen[bytes]) -> bool:
    """Whether this controller process has sent requests yet."""
    return any(r.user_agent.endswith(f"-{proc.pid})") for r in w.cluster.requests[-50:])


def holder_of(w: World) -> str:
    lease = w.cluster.get("leases", "gpu-driver-upgrader", "gpu-operator", "coordination.k8s.io")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def replica_campaign(tmp: Path, rollouts: int, seed: int, replicas: int = 2) -> Figures:
    """Several controller processes at once; sometimes the leader is killed. Writes to nodes and
    pods must come from one replica at a time: identity switches never outnumber lease handovers."""
    rng = random.Random(seed)
    figures = Figures(f"{replicas}-replica campaign (seed {seed})")
    started = time.monotonic()
    for index in range(rollouts):
        w = world(tmp, seed=seed + index)
        procs = [spawn(w, tmp / f"replica-{index}-{r}.log") for r in range(replicas)]
        try:
            if index % 2 == 1:  # kill whoever leads, once, mid-rollout
                wait_for(lambda w=w: bool(holder_of(w)), 60)  # replicas may take a while to start on a busy machine
                time.sleep(rng.uniform(0.5, 3.0))
                holder = holder_of(w)
                leader = next((p for p in procs if holder.endswith(f"-{p.pid}")), None)
                if leader is None:
                    figures.violations.append(f"rollout {index}: no replica held the lease ({holder!r})")
                else:
                    leader.send_signal(signal.SIGKILL)
                    leader.wait(timeout=10)
                    figures.counts["leader kills"] += 1
            if not wait_for(w.all_done, 120):
                figures.violations.append(f"rollout {index}: did not finish")
            w.reported_done()
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(timeout=15)
            w.cluster.stop()
        contenders = {r.user_agent for r in w.cluster.requests if r.resource == "leases"}
        if len(contenders) != replicas:
            figures.violations.append(f"rollout {index}: {len(contenders)} replicas contended for the lease")
        switches, handovers = writer_switches(w.cluster), lease_handovers(w.cluster)
        if switches > handovers:
            figures.violations.append(f"rollout {index}: {switches} writer switches > {handovers} lease handovers")
        figures.counts["writer switches"] += switches
        figures.counts["lease handovers"] += handovers
        figures.violations += [f"rollout {index}: {v}" for v in w.violations()]
        figures.counts.update(w.paths())
        figures.rollouts += 1
    figures.seconds = time.monotonic() - started
    return figures


# ----- API faults ----------------------------------------------------------------------------------

def fault_campaign(tmp: Path, rollouts: int, seed: int, rate: float = 0.05) -> Figures:
    """`rate` of every verb's requests faulted (500, 429 with Retry-After, 409, dropped connection),
    split evenly, with the controller in process over HTTP; each rollout must finish cleanly."""
    figures = Figures(f"{rate:.0%} API fault campaign (seed {seed})")
    started = time.monotonic()
    for index in range(rollouts):
        w = world(tmp, faults=FaultPlan.uniform(rate, seed=seed + index), seed=seed + index)
        controller = build_controller(k8s.ApiClient(k8s.Configuration(host=w.url)), Policy(),
                                      fast_settings(f"faults-{index}"))
        attach_rollout(controller, ROLLOUT)  # its GET faulted too: retried as every read is
        stop, wake = threading.Event(), threading.Event()
        start_watches(controller, stop, wake)
        loop = threading.Thread(target=controller.run, args=(stop, wake), daemon=True)
        loop.start()
        try:
            if not wait_for(w.all_done, 180):
                figures.violations.append(f"rollout {index}: did not finish (phase {w.phase()})")
            w.reported_done()
        finally:
            stop.set()
            wake.set()
            loop.join(timeout=15)
            w.cluster.stop()
        injected = Counter(r.fault for r in w.cluster.requests if r.fault)
        figures.counts.update({f"injected {k}": v for k, v in injected.items()})
        figures.counts["requests"] += len(w.cluster.requests)
        figures.counts.update(w.paths())
        figures.violations += [f"rollout {index}: {v}" for v in w.violations()]
        figures.rollouts += 1
    figures.seconds = time.monotonic() - started
    return figures


# ----- disturbances --------------------------------------------------------------------------------
