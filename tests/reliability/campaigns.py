"""Crash, fault and two-replica campaigns on the emulator, reproducible from their seed.

Every campaign runs whole rollouts and checks the invariants (`RolloutRecorder.check`) on the
emulator's history after each one. The short versions run in CI; set UPGRADER_CAMPAIGN=full for
the full ones, which print their figures:

    UPGRADER_CAMPAIGN=full .venv/bin/python -m pytest tests/reliability/test_campaigns.py -s
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from tests.e2e.conftest import FAST_POLICY, FAST_SIM, fast_settings
from upgrader.core.policy import policy_from_mapping
from upgrader.core.states import STATE_LABEL, WAS_UNSCHEDULABLE, State
from upgrader.runner import build_controller, start_watches
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.faults import FaultPlan
from upgrader.sim.fleet_builders import (
    DRIVER_REPO,
    NEW_DRIVER,
    OPERATOR_NS,
    add_dra_pod,
    driver_tag,
    operator_render,
    partition_mig,
    pinned_workload_pod,
)
from upgrader.sim.invariants import RolloutRecorder, lease_handovers, writer_switches
from upgrader.sim.scenarios import ScenarioInfo, build
from upgrader.sim.settings import SimSettings

FULL = os.environ.get("UPGRADER_CAMPAIGN") == "full"
ORDER = ["us-east-1a", "us-east-1b", "us-east-1c"]
LEASE_SECONDS = "1"
# The fast policy, with drain as the fallback of a GPU pod deletion that cannot finish.
POLICY = {**FAST_POLICY, "drain": {"enable": True, "force": True, "podSelector": "app=scratch"}}
MIG = "nvidia.com/mig-1g.10gb"
DRIVER_APP = "nvidia-driver-daemonset"


def operator_paths(cluster: EmulatedCluster, info: ScenarioInfo) -> None:
    """Put the GPU Operator's paths in play on the healthy fleet: a MIG pod, a DRA-claim pod, a bare GPU
    pod that sends its node to the drain, a node the Operator left in progress (taken over), a node
    whose driver upgrade is restart-only, and a node that fails on a missing image and recovers when
    the image is published a few seconds after its failure."""
    a1, a2, b1, b2, c1, c2 = info.nodes
    partition_mig(cluster, a2)
    cluster.create("pods", pinned_workload_pod("mig-infer", a2, {MIG: "1"}), "ml-training")
    add_dra_pod(cluster, b1)
    bare = pinned_workload_pod("scratch", c1, {"nvidia.com/gpu": "1"}, "batch")
    bare["metadata"].pop("ownerReferences")
    cluster.create("pods", bare, "batch")
    nodes = cluster.type("nodes")
    # Left in progress and cordoned by the Operator, marked as runbooks/take-over-from-gpu-operator.md's
    # step 3 marks the Operator's own cordons (unmarked, upgrader would keep it cordoned and ask).
    cluster.store.patch(nodes, None, c2, "application/merge-patch+json", {
        "metadata": {"labels": {STATE_LABEL: State.POD_DELETION_REQUIRED.value},
                     "annotations": {WAS_UNSCHEDULABLE: "false"}},
        "spec": {"unschedulable": True}})
    restart_only(cluster, b2)
    kernel = (cluster.get("nodes", a1) or {})["status"]["nodeInfo"]["kernelVersion"]
    tag = driver_tag(NEW_DRIVER, kernel)
    cluster.settings.registry[DRIVER_REPO].discard(tag)
    publish_after_failure(cluster, a1, tag)


def publish_after_failure(cluster: EmulatedCluster, node: str, tag: str, checks: int = 240) -> None:
    """Publish the missing image a few seconds after `node` is upgrade-failed (checked every half
    second), so its recovery happens however slowly faults make the rollout go; after `checks` checks
    it is published anyway, and the campaign's figures show no recovery."""

    def check(left: int) -> None:
        labels = ((cluster.get("nodes", node) or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(STATE_LABEL) == State.FAILED.value or left == 0:
            cluster.store.scheduler.after(3.0, "publish the image",
                                          lambda: cluster.settings.registry[DRIVER_REPO].add(tag))
        else:
            cluster.store.scheduler.after(0.5, "wait for the failure", lambda: check(left - 1))

    check(checks)


def restart_only(cluster: EmulatedCluster, node: str) -> None:
    """`node`'s driver at the new driver (its pod recreated), then a label on the templates: `node` is a
    revision behind with the same DRIVER_CONFIG_DIGEST, the rest two revisions behind."""
    pods, ds_type = cluster.type("pods"), cluster.type("daemonsets", "apps")
    (driver,) = [p for p in cluster.store.objects(pods, OPERATOR_NS)
                 if p["spec"].get("nodeName") == node and p["metadata"]["labels"].get("app") == DRIVER_APP]
    ds = cluster.store.find(ds_type, OPERATOR_NS, driver["metadata"]["ownerReferences"][0]["name"])
    assert ds is not None
    with cluster.store.bulk():  # swapped in place: no restart, no incident
        cluster.store.remove(pods, driver)
        cluster.daemonsets.create_pod(ds, node, ready_now=True)
    cluster.daemonsets.driver.ready(ds, node)
    for ds in cluster.store.objects(ds_type, OPERATOR_NS):
        if ds["metadata"]["labels"].get("app") == DRIVER_APP:
            template = ds["spec"]["template"]
            labels = {**template["metadata"]["labels"], "team": "gpu"}
            cluster.store.patch(ds_type, OPERATOR_NS, ds["metadata"]["name"], "application/merge-patch+json",
                                {"spec": {"template": operator_render({**template, "metadata": {"labels": labels}})}})


@dataclass
class Figures:
    """What a campaign did, for its printout."""

    name: str
    rollouts: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        text = (f"{self.name}: {self.rollouts} rollouts in {self.seconds:.0f} s, {counts}; "
                f"{len(self.violations)} invariant violations")
        return "\n  ".join([text, *self.violations])


@dataclass
class World:
    cluster: EmulatedCluster
    info: ScenarioInfo
    recorder: RolloutRecorder
    url: str
    kubeconfig: Path

    @property
    def domain_of(self) -> dict[str, str]:
        return {n: z for z, nodes in self.info.domains.items() for n in nodes}

    def phase(self) -> str | None:
        cm = self.cluster.get("configmaps", "gpu-driver-upgrade-status", "gpu-operator")
        return (cm or {}).get("data", {}).get("phase")

    def all_done(self) -> bool:
        return all((self.cluster.get("nodes", n) or {}).get("metadata", {}).get("labels", {}).get(STATE_LABEL)
                   == State.DONE.value for n in self.info.nodes)

    def paths(self) -> Counter[str]:
        """Which of the GPU Operator's paths this rollout took, from the node history."""
        seen: Counter[str] = Counter()
        last: dict[str, str | None] = {}
        edges = {
            (State.POD_DELETION_REQUIRED.value, State.DRAIN_REQUIRED.value): "drain fallbacks",
            (State.FAILED.value, State.VALIDATION_REQUIRED.value): "failed nodes recovered",
            (State.CORDON_REQUIRED.value, State.POD_RESTART_REQUIRED.value): "restart-only restarts",
        }
        for record in self.recorder.records:
            edge = (last.get(record.node), record.state)
            if edge in edges:
                seen[edges[edge]] += 1
            last[record.node] = record.state
        seen["adoptions"] += sum(1 for r in self.recorder.records if r.node == self.info.nodes[-1]
                                 and "gpu-upgrader.io/started-at" in r.annotations
                                 and r.state == State.POD_DELETION_REQUIRED.value) > 0
        return seen

    def violations(self, **kwargs: Any) -> list[str]:
        policy = policy_from_mapping(POLICY)
        found = self.recorder.check(policy, self.domain_of, ORDER[0], ORDER, **kwargs)
        found += [f"incident: {i}" for i in self.cluster.daemonsets.incidents]
        if not self.all_done():
            found.append("not every node reached upgrade-done")
        return found


def world(tmp: Path, scenario: str = "healthy", faults: FaultPlan | None = None, seed: int = 0) -> World:
    cluster = EmulatedCluster(settings=SimSettings(**FAST_SIM), faults=None, seed=seed)
    info = build(cluster, scenario, 6, job_seconds=1.5)
    operator_paths(cluster, info)
    recorder = RolloutRecorder(cluster)
    recorder.initially_cordoned.discard(info.nodes[-1])  # the Operator's own cordon: ours to lift
    url = cluster.serve()
    cluster.faults = faults  # after building: the scenario itself is not faulted
    kubeconfig = cluster.write_kubeconfig(tmp / f"{scenario}-{seed}.kubeconfig")
    return World(cluster, info, recorder, url, kubeconfig)


def wait_for(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


# ----- controller processes ----------------------------------------------------------------------

def spawn(w: World, policy_file: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "UPGRADER_REQUEUE_SECONDS": "0.1", "UPGRADER_LEASE_DURATION_SECONDS": LEASE_SECONDS}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "upgrader.cli", "run", "--kubeconfig", str(w.kubeconfig),
                                 "--policy", str(policy_file)], env=env, stdout=out, stderr=subprocess.STDOUT)


def policy_file(tmp: Path) -> Path:
    path = tmp / "policy.yaml"
    path.write_text(yaml.safe_dump(POLICY))
    return path


def kill_campaign(tmp: Path, kills: int, seed: int) -> Figures:
    """SIGKILL the controller at random moments, restarting it each time, across as many rollouts
    as it takes to deliver `kills` kills; every rollout must still finish with every promise kept."""
    rng = random.Random(seed)
    figures = Figures(f"SIGKILL campaign (seed {seed})")
    started = time.monotonic()
    log = tmp / "kill.log"
    while figures.counts["kills"] < kills:
        w = world(tmp, seed=seed + figures.rollouts)
        proc = spawn(w, policy_file(tmp), log)
        try:
            while not w.all_done() and figures.counts["kills"] < kills:
                if wait_for(w.all_done, rng.uniform(0.3, 2.5)):
                    break
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
                figures.counts["kills"] += 1
                proc = spawn(w, policy_file(tmp), log)
            if not wait_for(w.all_done, 120):
                figures.violations.append(f"rollout {figures.rollouts}: did not finish after the kills")
            # The last controller must be up (past its imports, signal handlers set) before SIGTERM.
            wait_for(lambda w=w, proc=proc: started_requests(w, proc), 60)
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
        procs = [spawn(w, policy_file(tmp), tmp / f"replica-{index}-{r}.log") for r in range(replicas)]
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
        controller = build_controller(k8s.ApiClient(k8s.Configuration(host=w.url)),
                                      policy_from_mapping(POLICY), fast_settings(f"faults-{index}"))
        stop, wake = threading.Event(), threading.Event()
        start_watches(controller, stop, wake)
        loop = threading.Thread(target=controller.run, args=(stop, wake), daemon=True)
        loop.start()
        try:
            if not wait_for(w.all_done, 180):
                figures.violations.append(f"rollout {index}: did not finish (phase {w.phase()})")
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
