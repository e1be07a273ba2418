"""Evictions a PodDisruptionBudget refuses back off per budget, on a virtual clock: a blocked budget is
asked 10 s, 20 s, 40 s ... apart (capped at 300 s) instead of every pass, the halt says what blocks as
before, and the budget's disruptionsAllowed changing sends the eviction at the next pass."""

from __future__ import annotations

import itertools
import json

from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.fleet.eviction_backoff import CAP_SECONDS
from upgrader.core.model.states import BLOCKED_KIND, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

POLICY = {"maxParallelUpgrades": 1, "failureDomains": {"canary": "us-east-1a"}, "gpuPodDeletion": {"timeoutSeconds": 0}}


def test_a_blocked_budget_is_asked_less_and_less_and_at_once_when_it_changes() -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "pdb-blocked")
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy_from_mapping(POLICY), Settings(identity="virtual"), cluster.store.clock.now)

    def refusals() -> list[float]:
        return [r.time for r in cluster.requests if r.subresource == "eviction" and r.status == 429]

    def run(seconds: int) -> None:
        for _ in range(seconds):
            controller.reconcile()
            cluster.advance(1)

    run(900)  # one pass a second
    times = refusals()
    gaps = [round(b - a) for a, b in itertools.pairwise(times)]
    assert gaps[:5] == [10, 20, 40, 80, 160] and all(g <= CAP_SECONDS + 1 for g in gaps), gaps
    assert len(times) <= 9, f"{len(times)} refusals in 900 passes"
    node = cluster.get("nodes", info.blocked_node or "")
    assert node is not None and node["metadata"]["annotations"][BLOCKED_KIND] == "pdb"
    cm = cluster.get("configmaps", "gpu-driver-upgrade-status", "gpu-operator") or {}
    status = json.loads(cm["data"]["status.json"])
    assert status["phase"] == "Halted" and "PodDisruptionBudget ml-training/critical-finetune" in status["message"]
    assert status["eviction_backoff"]["ml-training/critical-finetune"]["refusals"] == len(times)
    pdbs = cluster.type("poddisruptionbudgets", "policy")
    cluster.store.patch(pdbs, "ml-training", "critical-finetune", "application/merge-patch+json",
                        {"spec": {"minAvailable": 0}})
    before = len(cluster.requests)
    run(3)
    evicted = [r for r in cluster.requests[before:] if r.subresource == "eviction" and r.name == "critical-finetune-0"]
    assert [r.status for r in evicted][:1] == [201], "sent at the next pass once disruptionsAllowed changed"
    run(300)
    labels = (cluster.get("nodes", info.blocked_node or "") or {})["metadata"]["labels"]
    assert labels["nvidia.com/gpu-driver-upgrade-state"] != State.POD_DELETION_REQUIRED.value
