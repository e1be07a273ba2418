"""PDB-aware choice of the next nodes, on a virtual clock: with one PodDisruptionBudget (maxUnavailable
1) over pods on three of the canary zone's four nodes and three slots, the first pass starts one of
those and the node the budget does not cover, and leaves the third slot free rather than fill it with
a node that would sit cordoned behind the budget; the wait says so while only such nodes are left,
and the rollout completes with every promise kept."""

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

POLICY = {"pdbAwareStarts": True, "maxParallelUpgrades": 3, "maxUnavailable": "100%",
          "failureDomains": {"canary": "us-east-1a"}, "gpuPodDeletion": {"timeoutSeconds": 0}}


def _fleet() -> tuple[EmulatedCluster, dict[str, str], list[str]]:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy", 12)
    covered = info.domains["us-east-1a"][:3]
    budgets = cluster.type("poddisruptionbudgets", "policy")
    for pdb in cluster.store.objects(budgets):  # the scenario's own budgets: this one alone is judged here
        cluster.store.delete(budgets, pdb["metadata"]["namespace"], pdb["metadata"]["name"])
    spec = {"selector": {"matchLabels": {"app": "serve"}}, "maxUnavailable": 1}
    cluster.create("poddisruptionbudgets", {"metadata": {"name": "serve", "namespace": "inference"}, "spec": spec},
                   "inference", "policy")
    for i, node in enumerate(covered):
        pod = pod_object(f"serve-{i}", node, {"app": "serve"}, "nvcr.io/nvidia/tritonserver:24.05", 1,
                         ("apps/v1", "ReplicaSet", "serve-7f9c"))
        cluster.create("pods", pod, "inference")
    return cluster, {n: z for z, nodes in info.domains.items() for n in nodes}, covered


def test_a_start_behind_a_spent_budget_gives_its_slot_to_a_node_outside_it() -> None:
    cluster, domain_of, covered = _fleet()
    recorder = RolloutRecorder(cluster)
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    policy = policy_from_mapping(POLICY)
    controller = Controller(api, policy, Settings(identity="virtual"), cluster.store.clock.now)
    first = controller.reconcile()
    canary = set(domain_of) & {n for n, z in domain_of.items() if z == "us-east-1a"}
    started = {s.node for s in recorder.starts()}
    assert len(started) == 2 and len(started & set(covered)) == 1, started
    assert started - set(covered) == canary - set(covered), "the node the budget does not cover took the slot"
    assert first.status.phase == "Running"
    waits = []
    for _ in range(900):
        cluster.advance(1)
        report = controller.reconcile()
        waits.append(getattr(report.status.waiting_on if report.status else None, "reason", None))
        if getattr(report.status, "phase", None) == "Done":
            break
    assert report.status.phase == "Done", getattr(report.status, "message", None)
    assert "pdb-capacity" in waits, "the wait named the budget when only nodes behind it were left"
    assert set(recorder.final_states().values()) == {State.DONE.value}
    assert recorder.check(policy, domain_of, "us-east-1a") == []
