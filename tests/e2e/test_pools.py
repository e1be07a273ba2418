"""Pools end to end on a virtual clock (docs/policy.md#pools): two pools of a 12-node, 3-zone fleet
(H100 training, A100 inference) progress side by side, each under its own maxParallelUpgrades,
canary and promotion gate; a halt in one stops only that one unless haltAcrossPools; the status says
each pool's phase, domain and wait; `upgrader promote --pool` promotes one pool's stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from upgrader.commands.cli import main
from upgrader.core.model.states import IN_PROGRESS

from .test_rollout_object import SPEC, World

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
POOLS: list[dict[str, Any]] = [
    {"name": "training", "nodeSelector": f"nvidia.com/gpu.product={H100}", "maxParallelUpgrades": 2,
     "failureDomains": {"canary": "us-east-1a", "canaryNodes": 1}},
    {"name": "inference", "nodeSelector": f"nvidia.com/gpu.product={A100}", "maxParallelUpgrades": 1,
     "failureDomains": {"canary": "us-east-1c"}, "promotionGate": "canary"},
]
POOLED = {**SPEC, "maxUnavailable": "50%", "waitForCompletion": None, "pools": POOLS}


def members(w: World, product: str) -> set[str]:
    nodes = w.cluster.store.list(w.cluster.type("nodes"), None).items
    return {n["metadata"]["name"] for n in nodes if n["metadata"]["labels"]["nvidia.com/gpu.product"] == product}


def pool(w: World, name: str) -> dict[str, Any]:
    return next(p for p in w.obj["status"]["report"]["pools"] if p["name"] == name)


def both_in_progress_at_once(w: World, a: set[str], b: set[str]) -> bool:
    state: dict[str, str | None] = {}
    progress = {s.value for s in IN_PROGRESS}
    for r in w.recorder.records:
        state[r.node] = r.state
        busy = {n for n, s in state.items() if s in progress}
        if busy & a and busy & b:
            return True
    return False


def test_two_pools_go_side_by_side_each_with_its_canary_budget_and_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = World(POOLED, nodes=12)
    kubeconfig = w.serve(tmp_path)
    training, inference = members(w, H100), members(w, A100)
    zone = {n: z for z, nodes in w.info.domains.items() for n in nodes}
    try:
        assert len(training) == len(inference) == 6
        w.run_until_waiting("awaiting-promotion", 400)
        gate = pool(w, "inference")["waiting_on"]
        assert gate["reason"] == "awaiting-promotion" and gate["stage"] == "inference:us-east-1c", gate
        assert w.waiting_on()["stage"] == "inference:us-east-1c"  # the object names the pool's stage
        # Each pool's domain on the object, for `kubectl get dro` (inference's is the one its gate opens to).
        assert w.obj["status"]["currentDomain"] == (
            f"training:{pool(w, 'training')['current_domain']}, inference:us-east-1a")
        # The training pool went on meanwhile, two nodes at a time, while inference did one at a time.
        assert both_in_progress_at_once(w, training, inference)
        assert w.in_progress_at_most(training) == 2 and w.in_progress_at_most(inference) == 1
        w.run(60)
        started = {s.node for s in w.recorder.starts()}
        assert {zone[n] for n in started & inference} == {"us-east-1c"}, "nothing of inference past its gate"
        assert pool(w, "training")["phase"] == "Done", pool(w, "training")

        capsys.readouterr()
        assert main(["promote", "--kubeconfig", kubeconfig, "--rollout", "default", "--pool", "inference"]) == 0
        assert capsys.readouterr().out == (
            f"promoted inference:us-east-1c (finished at {gate['finished_at']}): the promotion gate opens; "
            "the next pass goes on\n"
        )
        w.run(600, until="Done")
        report = w.obj["status"]["report"]
        assert report["phase"] == "Done" and [p["phase"] for p in report["pools"]] == ["Done", "Done"]
        for name in ("training", "inference"):
            share = next(p for p in report["pools"] if p["name"] == name)
            assert share["nodes_total"] == 6 and share["nodes_by_state"]["upgrade-done"] == 6, share
        # The audit, pool by pool: each kept its own budget, domain order, canary nodes and soak.
        policy = w.controller.policy
        for spec, nodes in ((POOLS[0], training), (POOLS[1], inference)):
            own = policy.for_pool(next(p for p in policy.pools if p.name == spec["name"]))
            domain = {n: zone[n] for n in nodes}
            assert w.recorder.check(own, domain, spec["failureDomains"]["canary"], pooled=True) == [], spec["name"]
        # The training pool's first node went alone (canaryNodes 1).
        first = [s.node for s in w.recorder.starts() if s.node in training]
        assert zone[first[0]] == "us-east-1a"
    finally:
        w.cluster.stop()


def test_a_halt_in_one_pool_lets_the_other_finish_and_halt_across_pools_stops_both() -> None:
    # pdb-blocked: gpu-a-01 (H100, training's canary domain) holds a pod no eviction may take.
    w = World({**POOLED, "onBlockedTimeout": "halt", "drain": {"enable": True, "timeoutSeconds": 30},
               "pools": [POOLS[0], {**POOLS[1], "promotionGate": "none"}]}, "pdb-blocked", nodes=12)
    training, inference = members(w, H100), members(w, A100)
    try:
        said = set()
        for _ in range(900):
            w.run(1)
            said.add(w.obj.get("status", {}).get("report", {}).get("message", ""))
            if w.obj["status"].get("phase") == "Done" or pool(w, "inference")["phase"] == "Done":
                break
        going = [m for m in said if m.endswith("; pool inference goes on (haltAcrossPools is false)")]
        assert going and going[0].startswith(f"halted: pool training: {w.info.blocked_node} blocked in "), said
        report = w.obj["status"]["report"]
        phases = {p["name"]: p["phase"] for p in report["pools"]}
        assert phases == {"training": "Halted", "inference": "Done"}, report["message"]
        assert report["phase"] == "Halted"
        assert report["message"].startswith(f"halted: pool training: {w.info.blocked_node} blocked in ")
        done = {n for n, s in w.recorder.final_states().items() if s == "upgrade-done"}
        assert inference <= done and not (training - {w.info.blocked_node}) <= done
    finally:
        w.cluster.stop()

    w = World({**POOLED, "haltAcrossPools": True, "drain": {"enable": True, "timeoutSeconds": 30},
               "pools": [POOLS[0], {**POOLS[1], "promotionGate": "none", "maxParallelUpgrades": 1}]},
              "pdb-blocked", nodes=12)
    try:
        w.run(300)  # the block comes within seconds; a pool that went on would be done well before this
        report = w.obj["status"]["report"]
        assert report["phase"] == "Halted"
        halt_rv = w.recorder.first_halt()
        assert halt_rv is not None
        # Starts while a node of either pool is blocked (a block the drain's retry cleared a moment is no halt).
        late = [s.node for s in w.recorder.starts() if s.rv > halt_rv.rv and w.recorder._halted_at(s.rv)]
        assert late == [], f"started while halted under haltAcrossPools: {late}"
        assert "goes on" not in report["message"], report["message"]
        assert not inference <= {n for n, s in w.recorder.final_states().items() if s == "upgrade-done"}
    finally:
        w.cluster.stop()
