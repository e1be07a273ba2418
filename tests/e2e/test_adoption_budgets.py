"""Adoption at take-over keeps every budget and the domain order (docs/migrating-from-gpu-operator.md):
nodes another controller put in progress but had not cordoned yet are not cordoned all at once; they
go back to upgrade-required and start in their turn. On a virtual clock, through the official client."""

from __future__ import annotations

from typing import Any

from tests.shown import shown
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder

POLICY: dict[str, Any] = {"maxParallelUpgrades": 1, "maxUnavailable": 1, "failureDomains": {"canary": "us-east-1b"}}


def test_nodes_another_controller_put_in_progress_start_in_their_turn() -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    # The other controller put one node of every zone in progress, none cordoned yet.
    taken = [nodes[0] for nodes in info.domains.values()]
    for name in taken:
        cluster.store.mutate(cluster.type("nodes"), None, name,
                             lambda n: n["metadata"]["labels"].__setitem__(STATE_LABEL, State.CORDON_REQUIRED.value))
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    policy = policy_from_mapping(POLICY)
    ctl = Controller(api, policy, Settings(identity="virtual"), cluster.store.clock.now)
    ctl.reconcile()  # the take-over: every one of them back to upgrade-required, then one start, in the canary
    cordoned = [n for n in info.nodes if cluster.get("nodes", n)["spec"].get("unschedulable")]
    assert cordoned == [], "nothing is cordoned just because another controller put it in progress"
    labels = {n: cluster.get("nodes", n)["metadata"]["labels"][STATE_LABEL] for n in info.nodes}
    assert [n for n, v in labels.items() if v != State.UPGRADE_REQUIRED.value] == ["gpu-b-01"]
    assert labels["gpu-b-01"] == State.CORDON_REQUIRED.value, "the canary's first node, started by upgrader"
    recorder = RolloutRecorder(cluster)  # from here on every node in progress is upgrader's
    status: dict[str, Any] = {}
    for _ in range(1500):
        status = shown(ctl.reconcile().status)
        if status.get("phase") == "Done":
            break
        cluster.advance(1.0)
    assert status["phase"] == "Done", status["message"]
    domain_of = {n: z for z, nodes in info.domains.items() for n in nodes}
    assert recorder.check(policy, domain_of, "us-east-1b") == [], "maxParallel 1, maxUnavailable 1, canary first"
    assert [r.zone for r in recorder.starts()][:1] == ["us-east-1b"], "the canary domain's other node next"
