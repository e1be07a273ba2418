"""The makespan benchmark (bench/makespan.py) at CI size: 40 nodes in 4 domains, maxParallelUpgrades 4,
randomised step durations and a few batch jobs to wait for, on a virtual clock.

Only outcomes are asserted (every node done, no broken promise, the makespan not below its lower
bound); the figures themselves are the benchmark's business.
"""

from __future__ import annotations

from typing import Any

from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.spread import BATCH_SELECTOR, SpreadInfo, build_spread, zone_names
from upgrader.sim.proving.invariants import RolloutRecorder
from upgrader.sim.proving.makespan import Timeline, aligned_work, drawn_parts, lower_bound, run_until_done, timeline

BASE = {"pod_recreate_delay": 5.0, "pod_ready_delay": 60.0, "validator_ready_delay": 20.0}
ZONES = zone_names(4)


def policy(parallel: int) -> dict[str, Any]:
    return {
        "maxParallelUpgrades": parallel,
        "maxUnavailable": "100%",
        "failureDomains": {"canary": ZONES[0], "soakSeconds": 60},
        "waitForCompletion": {"podSelector": BATCH_SELECTOR, "timeoutSeconds": 600},
    }


def rollout(
    nodes: int, parallel: int, seed: int, skip_idle: bool
) -> tuple[SimSettings, SpreadInfo, RolloutRecorder, Timeline, list[str]]:
    settings = SimSettings(jitter=1.0, seed=seed, **BASE)
    cluster = EmulatedCluster.virtual(settings=settings, seed=seed)
    info = build_spread(cluster, nodes, len(ZONES), gpu_grace=30.0, job_every=5, job_seconds=60.0)
    recorder = RolloutRecorder(cluster)
    rules = policy_from_mapping(policy(parallel))
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, rules, Settings(identity="makespan"), cluster.store.clock.now)
    run_until_done(cluster, controller, nodes, 1.0, 20_000, skip_idle=skip_idle)
    violations = recorder.check(rules, info.domain_of, ZONES[0], ZONES)
    return settings, info, recorder, timeline(recorder, info.nodes), violations


def test_jittered_rollout_of_40_nodes_in_4_domains_finishes_within_its_promises() -> None:
    settings, info, recorder, seen, violations = rollout(40, 4, seed=11, skip_idle=True)
    assert set(recorder.final_states().values()) == {"upgrade-done"}
    assert violations == []
    assert info.batch_jobs, "some nodes had a job to wait for"
    parts = {n: drawn_parts(settings, n, info.grace[n]) for n in info.nodes}
    assert len({round(p.ready, 3) for p in parts.values()}) > 1, "durations were randomised per node"
    drawn = {n: p.total for n, p in parts.items()}
    aligned = {n: aligned_work(p, 1.0) for n, p in parts.items()}
    for node in info.nodes:
        assert seen.busy[node] >= aligned[node] >= drawn[node]
        if node not in info.batch_jobs:
            assert seen.busy[node] == aligned[node], f"{node}: busy exactly its pass-aligned work"
    for work in (drawn, aligned, seen.busy):
        assert seen.makespan >= lower_bound(work, info.domains, 4, 60)


def test_skipping_idle_passes_changes_nothing() -> None:
    _, _, fast_rec, fast, fast_violations = rollout(12, 2, seed=5, skip_idle=True)
    _, _, slow_rec, slow, slow_violations = rollout(12, 2, seed=5, skip_idle=False)
    assert fast_violations == slow_violations == []
    assert fast == slow
    assert [(r.time, r.node, r.state) for r in fast_rec.records] == [
        (r.time, r.node, r.state) for r in slow_rec.records
    ]
