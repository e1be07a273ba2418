"""The world a campaign runs in: the healthy fleet with the GPU Operator's paths in play, its recorder,
the campaign policy and domain order, and the figures a campaign prints."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.conftest import FAST_POLICY, FAST_SIM
from upgrader.core.policy import policy_from_mapping
from upgrader.core.states import STATE_LABEL, WAS_UNSCHEDULABLE, State
from upgrader.sim.apiserver.faults import FaultPlan
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.builders import (
    DRIVER_REPO,
    NEW_DRIVER,
    OPERATOR_NS,
    add_dra_pod,
    driver_tag,
    operator_render,
    partition_mig,
    pinned_workload_pod,
)
from upgrader.sim.fleets.scenarios import ScenarioInfo, build
from upgrader.sim.proving.invariants import RolloutRecorder

FULL = os.environ.get("UPGRADER_CAMPAIGN") == "full"
ORDER = ["us-east-1a", "us-east-1b", "us-east-1c"]
# The fast policy, with drain as the fallback of a GPU pod deletion that cannot finish.
POLICY = {**FAST_POLICY, "drain": {"enable": True, "force": True, "podSelector": "app=scratch"}}
MIG = "nvidia.com/mig-1g.10gb"
DRIVER_APP = "nvidia-driver-daemonset"
STATUS = ("gpu-operator", "gpu-driver-upgrade-status")
CONTROL = ("gpu-operator", "gpu-driver-upgrade-control")  # the operators' pause and acknowledgements


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
    """Publish the missing image a few seconds after `node`, or any node on its kernel that a domain
    order put first, is upgrade-failed (checked every half second), so its recovery happens however
    slowly faults make the rollout go; after `checks` checks it is published anyway, and the
    campaign's figures show no recovery."""
    kernel = (cluster.get("nodes", node) or {})["status"]["nodeInfo"]["kernelVersion"]

    def failed() -> bool:
        return any((n.get("metadata", {}).get("labels") or {}).get(STATE_LABEL) == State.FAILED.value
                   and n["status"]["nodeInfo"]["kernelVersion"] == kernel
                   for n in cluster.store.objects(cluster.type("nodes")))

    def check(left: int) -> None:
        if failed() or left == 0:
            cluster.store.timers.after(3.0, "publish the image",
                                          lambda: cluster.settings.registry[DRIVER_REPO].add(tag))
        else:
            cluster.store.timers.after(0.5, "wait for the failure", lambda: check(left - 1))

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

    def status(self) -> dict[str, Any]:
        """The status as `upgrader status -o json` shows it."""
        cm = self.cluster.get("configmaps", STATUS[1], STATUS[0])
        try:
            status = json.loads(((cm or {}).get("data") or {}).get("status.json") or "{}")
        except ValueError:
            return {}
        return status if isinstance(status, dict) else {}

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
            if edge in edges and record.by is None:  # upgrader's own moves, not a person's or a restore's
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
    recorder = RolloutRecorder(cluster, status=STATUS, control=CONTROL)
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
