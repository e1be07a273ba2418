"""A node running two pods of one PodDisruptionBudget (maxUnavailable 1): the pass evicts one, holds
the other (the API server would refuse it, 429) and waits for the first to come back, instead of
calling the node blocked and halting the rollout; the rollout completes with no eviction refused."""

from __future__ import annotations

from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import pod_object
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder

POLICY = {"maxParallelUpgrades": 1, "maxUnavailable": "100%", "failureDomains": {"canary": "us-east-1a"},
          "waitForCompletion": None}


def test_two_pods_of_one_budget_on_a_node_wait_for_each_other_and_never_halt() -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    node = info.domains["us-east-1a"][0]
    spec = {"selector": {"matchLabels": {"app": "serve"}}, "maxUnavailable": 1}
    cluster.create("poddisruptionbudgets", {"metadata": {"name": "serve", "namespace": "inference"}, "spec": spec},
                   "inference", "policy")
    for i, where in enumerate([node, node, *info.domains["us-east-1b"]]):
        cluster.create("pods", pod_object(f"serve-{i}", where, {"app": "serve"}, "nvcr.io/nvidia/tritonserver:24.05",
                                          1, ("apps/v1", "ReplicaSet", "serve-7f9c")), "inference")
    cluster.store.run_due()
    recorder = RolloutRecorder(cluster)
    policy = policy_from_mapping(POLICY)
    controller = Controller(KubeApi(cluster.client(), sleep=lambda _: None), policy, Settings(identity="virtual"),
                            cluster.store.clock.now)
    phases = set()
    for _ in range(900):
        report = controller.reconcile()
        phases.add(report.status.phase)
        if report.status.phase == "Done":
            break
        cluster.advance(1)
    assert report.status.phase == "Done", getattr(report.status, "message", None)
    assert "Halted" not in phases
    evictions = [r for r in cluster.requests if r.subresource == "eviction" and r.name.startswith("serve-")]
    assert [r.status for r in evictions if r.status == 429] == [], "no eviction the budget could not allow was sent"
    assert {r.name for r in evictions if r.status == 201} >= {"serve-0", "serve-1"}
    assert set(recorder.final_states().values()) == {State.DONE.value}
    assert recorder.check(policy, {n: z for z, ns in info.domains.items() for n in ns}, "us-east-1a") == []
