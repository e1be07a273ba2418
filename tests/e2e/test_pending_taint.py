"""taintPendingNodes end to end on a virtual clock: while the rollout runs, the nodes still to be
upgraded carry our PreferNoSchedule taint; at its end none does; the emulator's scheduler, scoring
PreferNoSchedule as kube-scheduler's TaintToleration does, puts a replaced pod on an untainted node
with room rather than on a tainted one with more (docs/policy.md#taint-pending-nodes)."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.rollout.pending_taint import KEY
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

from .conftest import FAST_POLICY, Rollout
from .test_rollout_object import SPEC, World


def _tainted(cluster: EmulatedCluster) -> set[str]:
    return {n["metadata"]["name"] for n in cluster.store.objects(cluster.type("nodes"))
            if any(t.get("key") == KEY for t in (n.get("spec") or {}).get("taints") or [])}


def test_pending_nodes_carry_the_taint_while_the_rollout_runs_and_none_after() -> None:
    w = World({**SPEC, "taintPendingNodes": {"enable": True}})
    w.run(2)
    pending = {n for n, s in w.recorder.final_states().items() if s != "upgrade-done"}
    assert pending and _tainted(w.cluster) == pending
    seen_done_untainted = False
    for _ in range(400):
        w.run(1)
        done = {n for n, s in w.recorder.final_states().items() if s == "upgrade-done"}
        assert not (done & _tainted(w.cluster)), "an upgraded node keeps no taint of ours"
        seen_done_untainted |= bool(done)
        if w.obj.get("status", {}).get("phase") == "Done":
            break
    assert seen_done_untainted and w.obj["status"]["phase"] == "Done"
    assert _tainted(w.cluster) == set()


def test_a_replaced_pod_prefers_a_node_without_the_taint() -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy", 6)
    nodes = cluster.type("nodes")
    pods = cluster.type("pods")
    # Every node but one is tainted; the untainted one is the fullest that still has room.
    free = {n: cluster.workloads.free(cluster.store.get(nodes, None, n)) for n in info.nodes}
    roomy = [n for n in info.nodes if free[n] > 0]
    target = min(roomy, key=lambda n: (free[n], n))
    for name in info.nodes:
        if name != target:
            taint = {"spec": {"taints": [{"key": KEY, "effect": "PreferNoSchedule"}]}}
            cluster.store.patch(nodes, None, name, "application/merge-patch+json", taint)
    victim = next(p for p in cluster.store.objects(pods)
                  if p["spec"].get("nodeName") not in (None, target) and any(
                      r.get("kind") == "ReplicaSet" for r in p["metadata"].get("ownerReferences") or [])
                  and int(((p["spec"]["containers"][0].get("resources") or {}).get("limits") or {})
                          .get("nvidia.com/gpu", 0)) <= free[target])
    cluster.store.delete(pods, victim["metadata"]["namespace"], victim["metadata"]["name"])
    cluster.advance(5)
    placed = [p for p in cluster.store.objects(pods, victim["metadata"]["namespace"])
              if p["metadata"]["name"] != victim["metadata"]["name"]
              and p["metadata"]["creationTimestamp"] > victim["metadata"]["creationTimestamp"]]
    assert [p["spec"].get("nodeName") for p in placed] == [target]


@pytest.mark.parametrize("enable", [True, False])
def test_taints_with_our_key_that_are_not_ours_stay_on_every_node(rollout: Any, enable: bool) -> None:
    """Only our own taint (docs/policy.md#only-our-taint): another's taint with our key (another effect,
    another value), put on by a person with real kubectl on GPU nodes and on a CPU node, is still there
    after a whole rollout, with taintPendingNodes on or off; ours is on no node at the end."""
    r: Rollout = rollout("healthy", {**FAST_POLICY, "taintPendingNodes": {"enable": enable}}, virtual=True)
    cpu = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1", "labels": {"kubernetes.io/os": "linux"}}}
    r.cluster.store.create(r.cluster.type("nodes"), None, cpu)
    gpu_a, gpu_b = r.info.nodes[0], r.info.nodes[-1]
    theirs = {"cpu-1": f"{KEY}=:NoExecute", gpu_a: f"{KEY}=maintenance:PreferNoSchedule", gpu_b: f"{KEY}=:NoSchedule"}
    for node, taint in theirs.items():
        r.kubectl("taint", "node", node, taint)
    status = r.run_until(("Done",), timeout=600)
    assert status["nodes_by_state"]["upgrade-done"] == len(r.info.nodes)
    left = {n["metadata"]["name"]: [(t["key"], t.get("value", ""), t["effect"]) for t in n["spec"].get("taints") or []
                                    if t["key"] == KEY] for n in r.cluster.store.objects(r.cluster.type("nodes"))}
    assert left["cpu-1"] == [(KEY, "", "NoExecute")]
    assert left[gpu_a] == [(KEY, "maintenance", "PreferNoSchedule")]
    assert left[gpu_b] == [(KEY, "", "NoSchedule")]
    assert not any(left[n] for n in r.info.nodes[1:-1]), "ours is on no node at the end"
