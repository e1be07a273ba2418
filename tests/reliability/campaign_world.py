"""The world a campaign runs in: the healthy fleet with the GPU Operator's paths in play, the
DriverRollout object `default` (deploy/crd.yaml) whose spec is the campaign policy and the controllers'
only source of intent (`run --rollout default`), its recorder, the domain order, and the figures a
campaign prints."""

from __future__ import annotations

import copy
import functools
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import FAST_POLICY, FAST_SIM
from upgrader.core.model.states import IN_PROGRESS, STATE_LABEL, WAS_UNSCHEDULABLE, State
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.core.policy.rollout_object import GROUP, KIND, PLURAL, VERSION
from upgrader.core.rollout.pending_taint import KEY as TAINT
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

from .promotion import Promoter, pool_parts

FULL = os.environ.get("UPGRADER_CAMPAIGN") == "full"
ORDER = ["us-east-1a", "us-east-1b", "us-east-1c"]
# The fast policy, with drain as the fallback of a GPU pod deletion that cannot finish.
# The canary zone's first node goes alone (canaryNodes), and the nodes still to be upgraded carry our
# PreferNoSchedule taint (taintPendingNodes), which no rollout may leave behind.
POLICY = {**FAST_POLICY, "drain": {"enable": True, "force": True, "podSelector": "app=scratch"},
          "failureDomains": {**FAST_POLICY["failureDomains"], "canaryNodes": 1},
          "taintPendingNodes": {"enable": True}}
# The crash, two-replica and fault campaigns split the fleet in two pools (docs/policy.md#pools): the
# H100 nodes (zones a and c) with a canary node of their own and a promotionGate a `Promoter` opens,
# and the A100 nodes (zone b) in the pool default, under the policy's own keys; they go side by side.
H100 = "NVIDIA-H100-80GB-HBM3"
TRAINING = {"name": "training", "nodeSelector": f"nvidia.com/gpu.product={H100}", "maxParallelUpgrades": 2,
            "failureDomains": {"canary": "us-east-1a", "canaryNodes": 1, "soakSeconds": 1},
            "promotionGate": "canary"}
POOLED = {**POLICY, "pools": [TRAINING]}
MIG = "nvidia.com/mig-1g.10gb"
DRIVER_APP = "nvidia-driver-daemonset"
ROLLOUT = "default"  # the DriverRollout the controllers follow (`run --rollout default`)
CRD = Path(__file__).resolve().parents[2] / "deploy" / "crd.yaml"
MERGE = "application/merge-patch+json"


@functools.cache
def _crd() -> dict[str, Any]:
    return dict(yaml.safe_load(CRD.read_text()))


def create_rollout(cluster: EmulatedCluster, spec: dict[str, Any]) -> None:
    """The CRD and the object `default` with `spec`, as `kubectl apply -f deploy/` makes them."""
    crds = cluster.type("customresourcedefinitions", "apiextensions.k8s.io")
    cluster.store.create(crds, None, copy.deepcopy(_crd()))
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": ROLLOUT}, "spec": spec}
    created = cluster.store.create(cluster.type(PLURAL, GROUP, VERSION), None, copy.deepcopy(body))
    # The schema prunes what it does not know: the audit's policy must be the one the controller reads.
    assert created["spec"] == spec, f"the CRD pruned the campaign policy: {created['spec']} != {spec}"


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
    policy_marked: Policy | None = None
    spec: dict[str, Any] = field(default_factory=lambda: dict(POLICY))
    promoter: Promoter | None = None

    @property
    def domain_of(self) -> dict[str, str]:
        return {n: z for z, nodes in self.info.domains.items() for n in nodes}

    def rollout(self) -> dict[str, Any]:
        """The DriverRollout object as the API server has it."""
        return self.cluster.get(PLURAL, ROLLOUT, None, GROUP, VERSION) or {}

    def phase(self) -> str | None:
        return (self.rollout().get("status") or {}).get("phase")

    def status(self) -> dict[str, Any]:
        """The status as `upgrader status -o json` shows it: the report the controller keeps in the
        object's status (what the status ConfigMap held before the object)."""
        report = (self.rollout().get("status") or {}).get("report")
        return report if isinstance(report, dict) else {}

    def patch_spec(self, spec: dict[str, Any]) -> None:
        """A platform engineer's `kubectl patch driverrollout default --type merge` of spec."""
        self.cluster.store.patch(self.cluster.type(PLURAL, GROUP, VERSION), None, ROLLOUT, MERGE, {"spec": spec})

    def acted_on(self, policy: Policy) -> None:
        """A pass of the leader acts on `policy` from here on: the audit judges by it from this moment
        (marked once per change, whichever replica leads)."""
        if policy != self.policy_marked:
            self.policy_marked = policy
            self.recorder.policy_in_effect(policy)

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
        if self.promoter is not None:
            seen["promotions"] += len(self.promoter.promoted)
            seen["pools side by side"] += self.side_by_side()
        return seen

    def side_by_side(self) -> bool:
        """Whether nodes of two pools were in progress at once in this rollout (pools, not one queue)."""
        parts = pool_parts(policy_from_mapping(self.spec), self.cluster, self.info.nodes)
        pool_of = {n: name for name, _, nodes in parts for n in nodes}
        state: dict[str, str | None] = {}
        progress = {s.value for s in IN_PROGRESS}
        for record in self.recorder.records:
            state[record.node] = record.state
            if len({pool_of[n] for n, s in state.items() if s in progress and n in pool_of}) > 1:
                return True
        return False

    def reported_done(self, timeout: float = 30.0) -> bool:
        """Whether the controller says so on the object (the intent it acts on is the object's), and,
        while it still runs, has taken its taint off every node: a removal the API refused in the pass
        that wrote Done is sent again by the next pass, so a campaign waits for it before stopping
        the controller (`tainted` then judges what is left)."""
        done = wait_for(lambda: self.phase() == "Done", timeout)
        wait_for(lambda: not self._carriers(), timeout)
        return done

    def violations(self, **kwargs: Any) -> list[str]:
        policy = policy_from_mapping(self.spec)
        found: list[str] = []
        for name, own, nodes in pool_parts(policy, self.cluster, self.info.nodes):
            domains = {n: self.domain_of[n] for n in nodes}
            order = [d for d in ORDER if d in domains.values()]
            where = f"pool {name}: " if policy.pools else ""
            found += [where + v for v in self.recorder.check(own, domains, order[0] if order else None, order,
                                                             pooled=bool(policy.pools), **kwargs)]
        found += self.promoter.violations(self) if self.promoter is not None else []
        found += [f"incident: {i}" for i in self.cluster.daemonsets.incidents]
        if not self.all_done():
            found.append("not every node reached upgrade-done")
        if self.phase() != "Done":
            found.append(f"the rollout object's status says {self.phase()}, not Done")
        found += [f"{name} still carries {TAINT} after the rollout" for name in self.tainted()]
        return found

    def tainted(self) -> list[str]:
        """Nodes carrying our PreferNoSchedule taint (core/rollout/pending_taint.py), once the rollout is done
        (the last pass's removals land a moment after the phase says Done)."""
        wait_for(lambda: not self._carriers(), 10)
        return self._carriers()

    def _carriers(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.cluster.store.objects(self.cluster.type("nodes"))
                      if any(t.get("key") == TAINT for t in (n.get("spec") or {}).get("taints") or []))


def world(tmp: Path, scenario: str = "healthy", faults: FaultPlan | None = None, seed: int = 0,
          spec: dict[str, Any] | None = None) -> World:
    """The fleet, and the rollout object with `spec` (default: POLICY) that the recorder follows: its
    spec's pause and acknowledgements, its status's current domain."""
    cluster = EmulatedCluster(settings=SimSettings(**FAST_SIM), faults=None, seed=seed)
    info = build(cluster, scenario, 6, job_seconds=1.5)
    operator_paths(cluster, info)
    chosen = POOLED if spec is None else spec
    create_rollout(cluster, chosen)
    recorder = RolloutRecorder(cluster, rollout=ROLLOUT)
    recorder.initially_cordoned.discard(info.nodes[-1])  # the Operator's own cordon: ours to lift
    url = cluster.serve()
    cluster.faults = faults  # after building: the scenario itself is not faulted
    kubeconfig = cluster.write_kubeconfig(tmp / f"{scenario}-{seed}.kubeconfig")
    w = World(cluster, info, recorder, url, kubeconfig, spec=chosen)
    if any(p.get("promotionGate", "none") != "none" for p in chosen.get("pools") or ()):
        w.promoter = Promoter(kubeconfig, ROLLOUT)
        w.promoter.start(w)
    return w


def wait_for(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
