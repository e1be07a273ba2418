"""A node counts against the pool that started it until it leaves progress
(docs/policy.md#a-node-counts-where-it-started): a node in progress whose labels move it to another
pool, or pools reordered in the spec so that another pool's selector takes it first, frees no slot of
the pool that started it; no pool has more in progress than its maxParallelUpgrades. The audit judges
each start's pool on its own, from the pools in the spec and the node's labels when it started, never
from what the controller wrote."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from upgrader.core.model.states import IN_PROGRESS, STARTED_POOL

from .test_pools import A100, H100, POOLED, POOLS, members
from .test_rollout_object import MERGE, World

PROGRESS = {s.value for s in IN_PROGRESS}
TRAINING = {**POOLS[0], "maxParallelUpgrades": 1, "failureDomains": {"canary": "us-east-1a"}}
INFERENCE = {**POOLS[1], "promotionGate": "none"}
ZONE_A = {"name": "zone-a", "nodeSelector": "topology.kubernetes.io/zone=us-east-1a", "maxParallelUpgrades": 1,
          "failureDomains": {"canary": "us-east-1a"}}
# Pool -> what selects it by labels, in spec order; `default` takes the rest under the spec's own budget of 1.
Selects = list[tuple[str, Callable[[dict[str, str]], bool]]]
BY_PRODUCT: dict[str, Callable[[dict[str, str]], bool]] = {
    "training": lambda labels: labels.get("nvidia.com/gpu.product") == H100,
    "inference": lambda labels: labels.get("nvidia.com/gpu.product") == A100,
    "zone-a": lambda labels: labels.get("topology.kubernetes.io/zone") == "us-east-1a",
}


def node(w: World, name: str) -> dict[str, Any]:
    return w.cluster.store.get(w.cluster.type("nodes"), None, name)


def state(w: World, name: str) -> str | None:
    return node(w, name)["metadata"]["labels"].get("nvidia.com/gpu-driver-upgrade-state")


def first_in_progress(w: World, among: set[str]) -> str:
    for _ in range(120):
        w.run(1)
        busy = [n for n in sorted(among) if state(w, n) in PROGRESS]
        if busy:
            return busy[0]
    raise AssertionError(f"none of {sorted(among)} started")


def relabel(w: World, name: str, labels: dict[str, Any]) -> None:
    w.cluster.store.patch(w.cluster.type("nodes"), None, name, MERGE, {"metadata": {"labels": labels}})


def most_in_progress_by_starting_pool(w: World, pools_at: Callable[[int], list[str]],
                                      labels_at: Callable[[str, int], dict[str, str]]) -> Counter[str]:
    """The most nodes in progress at once per pool that started them, replayed from the history."""
    starts = {(s.node, s.rv) for s in w.recorder.starts()}
    started_by: dict[str, str] = {}
    now: dict[str, str | None] = {}
    most: Counter[str] = Counter()
    for r in w.recorder.records:
        if (r.node, r.rv) in starts:
            labels = labels_at(r.node, r.rv)
            started_by[r.node] = next((p for p in pools_at(r.rv) if BY_PRODUCT[p](labels)), "default")
        now[r.node] = r.state
        busy = Counter(started_by[n] for n, s in now.items() if s in PROGRESS)
        for pool, count in busy.items():
            most[pool] = max(most[pool], count)
    return most


def test_a_node_moved_to_another_pool_mid_upgrade_keeps_its_slot_in_the_pool_that_started_it() -> None:
    w = World({**POOLED, "pools": [TRAINING, INFERENCE]}, nodes=12)
    training = members(w, H100)
    original = {n: dict(node(w, n)["metadata"]["labels"]) for n in members(w, H100) | members(w, A100)}
    try:
        moved = first_in_progress(w, training)
        assert node(w, moved)["metadata"]["annotations"][STARTED_POOL] == "training"
        moved_at = w.cluster.store.resource_version
        relabel(w, moved, {"nvidia.com/gpu.product": A100})  # now inference's selector takes it
        w.run(900, until="Done")
        assert w.obj["status"]["phase"] == "Done", w.obj["status"]["report"]["message"]
        most = most_in_progress_by_starting_pool(
            w, lambda rv: ["training", "inference"],
            lambda n, rv: {**original[n], "nvidia.com/gpu.product": A100} if n == moved and rv > moved_at
            else original[n])
        assert most == Counter({"training": 1, "inference": 1}), most
        assert all(s == "upgrade-done" for s in w.recorder.final_states().values())
        assert STARTED_POOL not in (node(w, moved)["metadata"].get("annotations") or {})
    finally:
        w.cluster.stop()


def test_pools_reordered_mid_upgrade_free_no_slot() -> None:
    # Overlapping selectors: put first, `zone-a` takes training's canary node in progress in us-east-1a too.
    w = World({**POOLED, "pools": [TRAINING, ZONE_A]}, nodes=12)
    original = {n: dict(node(w, n)["metadata"]["labels"]) for n in members(w, H100) | members(w, A100)}
    try:
        first_in_progress(w, members(w, H100))
        reordered_at = w.cluster.store.resource_version
        w.patch({"pools": [ZONE_A, TRAINING]})
        w.run(900, until="Done")
        assert w.obj["status"]["phase"] == "Done", w.obj["status"]["report"]["message"]
        most = most_in_progress_by_starting_pool(
            w, lambda rv: ["training", "zone-a"] if rv <= reordered_at else ["zone-a", "training"],
            lambda n, rv: original[n])
        assert max(most.values()) == 1 and set(most) <= {"training", "zone-a", "default"}, most
    finally:
        w.cluster.stop()
