"""Benchmark: the makespan of a virtual-time rollout of 1,000 nodes in 4 failure domains,
maxParallelUpgrades 16, with randomised (seeded) step durations, against its lower bound.

    .venv/bin/python bench/makespan.py [--nodes 1000] [--zones 4] [--parallel 16] [--seeds 1]

The controller runs in-process against the emulator on a virtual clock, passing every
`--pass-seconds`. Every node's delays are drawn per node (`SimSettings.jitter`, log-uniform
0.5x .. 2x of a base): GPU pod termination grace (30 s), driver pod recreation (5 s), driver pod
Ready (60 s), validators Ready (20 s); the old driver pod's grace is 1 s. Prints, per seed, the
makespan (first start -> last upgrade-done) and the lower bound = sum over domains of
max(longest node, domain work / parallelism) + soaks, for three definitions of a node's work:

- drawn: the sum of its drawn delays (the true lower bound: a controller passing infinitely often);
- aligned: the same on the controller's pass grid, each wait rounded up to a pass, plus the passes
  that only write (what this controller needs at best for the node alone);
- busy: measured, left upgrade-required -> upgrade-done, from the RolloutRecorder.

and the invariants the RolloutRecorder checked (target: makespan within 1.10x the drawn bound).
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.kube.cache import ClusterCache
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.spread import build_spread, zone_names
from upgrader.sim.proving.invariants import RolloutRecorder
from upgrader.sim.proving.makespan import aligned_work, drawn_parts, lower_bound, run_until_done, timeline

BASE = {"pod_recreate_delay": 5.0, "pod_ready_delay": 60.0, "validator_ready_delay": 20.0}
GPU_GRACE = 30.0
TARGET = 1.10


def policy_for(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "maxParallelUpgrades": args.parallel,
        "maxUnavailable": "100%",  # never binds: at most `parallel` nodes are ever unavailable
        "failureDomains": {"canary": zone_names(args.zones)[0], "soakSeconds": args.soak},
    }


def run(args: argparse.Namespace, seed: int) -> tuple[list[str], dict[str, float]]:
    """One rollout; the lines to print and its figures."""
    wall = time.perf_counter()
    settings = SimSettings(jitter=args.jitter, seed=seed, **BASE)
    cluster = EmulatedCluster.virtual(settings=settings, seed=seed)
    info = build_spread(cluster, args.nodes, args.zones, gpu_grace=GPU_GRACE)
    recorder = RolloutRecorder(cluster)
    built = time.perf_counter() - wall
    gc.collect()
    gc.freeze()  # the fleet lives for the whole run: keep the collector from rescanning it
    policy = policy_from_mapping(policy_for(args))
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy, Settings(identity="bench"), cluster.store.clock.now)
    sync = None if args.lists else watch_fed(cluster, controller)

    def progress(passes: int, report: PassReport) -> None:
        if args.verbose and passes % 500 == 0:
            done = report.status.nodes_by_state.get("upgrade-done", 0) if report.status is not None else 0
            print(f"  seed {seed} pass {passes}: {done} done, {time.perf_counter() - wall:.0f} s wall", flush=True)

    passes = run_until_done(cluster, controller, args.nodes, args.pass_seconds, 10 * 86400, progress,
                            skip_idle=not args.every_pass, sync=sync)
    rolled = time.perf_counter() - wall - built
    seen = timeline(recorder, info.nodes)
    parts = {n: drawn_parts(settings, n, info.grace[n]) for n in info.nodes}
    works = {
        "drawn": {n: p.total for n, p in parts.items()},
        "aligned": {n: aligned_work(p, args.pass_seconds) for n, p in parts.items()},
        "busy": seen.busy,
    }
    bounds = {k: lower_bound(w, info.domains, args.parallel, args.soak) for k, w in works.items()}
    checked = time.perf_counter()
    zones = zone_names(args.zones)
    violations = recorder.check(policy, info.domain_of, zones[0], zones)
    checked = time.perf_counter() - checked
    gc.unfreeze()
    off_grid = max(abs(seen.busy[n] - works["aligned"][n]) for n in info.nodes)
    mean = {k: statistics.fmean(w.values()) for k, w in works.items()}
    out = [
        f"seed {seed}: {passes} passes; wall: build {built:.0f} s, rollout {rolled:.0f} s, check {checked:.0f} s",
        f"  makespan {seen.makespan:6.0f} s  (first start -> last upgrade-done, virtual)",
        *(f"  bound {kind:<7}{bound:6.0f} s  ratio {seen.makespan / bound:.3f}x" for kind, bound in bounds.items()),
        f"  node work mean: drawn {mean['drawn']:.1f} s, aligned {mean['aligned']:.1f} s, busy {mean['busy']:.1f} s"
        f" (busy vs aligned: max |diff| {off_grid:.3f} s)",
        *domain_lines(recorder, info.domains, seen.busy, args.parallel),
        f"  invariant violations: {len(violations)}",
        *(f"    {line}" for line in violations[:10]),
    ]
    return out, {"makespan": seen.makespan, **{f"bound_{k}": b for k, b in bounds.items()},
                 "violations": float(len(violations))}


def watch_fed(cluster: EmulatedCluster, controller: Controller) -> Callable[[], None]:
    """As `upgrader run` runs: nodes and driver pods from the watch-fed copy, whose watches deliver
    what happened before each pass (virtual time: stepped, not threads)."""
    cache = ClusterCache(KubeApi(cluster.client(), sleep=lambda _: None), controller.settings, lambda: None)
    controller.cache = cache

    def sync() -> None:
        cache.nodes.step()
        cache.driver_pods.step()

    return sync


def domain_lines(
    recorder: RolloutRecorder, domains: dict[str, list[str]], busy: dict[str, float], parallel: int
) -> list[str]:
    """Per domain: its span against its busy-time bound (the tail), and the gap to the next domain."""
    started = {s.node: s.time for s in recorder.starts()}
    lines, previous_done = [], None
    for zone, nodes in domains.items():
        first = min(started[n] for n in nodes)
        last = max(started[n] + busy[n] for n in nodes)
        bound = max(max(busy[n] for n in nodes), sum(busy[n] for n in nodes) / parallel)
        gap = "" if previous_done is None else f", started {first - previous_done:.0f} s after the previous"
        lines.append(f"  domain {zone}: {len(nodes)} nodes, span {last - first:.0f} s, busy bound {bound:.0f} s "
                     f"(tail +{last - first - bound:.0f} s){gap}")
        previous_done = last
    return lines


def one_seed(job: tuple[argparse.Namespace, int]) -> tuple[list[str], dict[str, float]]:
    return run(*job)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--zones", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--soak", type=int, default=120)
    parser.add_argument("--jitter", type=float, default=1.0, help="1.0: each delay 0.5x .. 2x its base")
    parser.add_argument("--pass-seconds", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="one process per seed, in parallel")
    parser.add_argument("--every-pass", action="store_true", help="do not skip passes that would do nothing")
    parser.add_argument("--lists", action="store_true",
                        help="every pass LISTs nodes and driver pods (no watch-fed copy), as before issue 24")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    print(f"{args.nodes} nodes in {args.zones} domains, maxParallelUpgrades {args.parallel}, soak {args.soak:g} s, "
          f"jitter {args.jitter:g}, pass every {args.pass_seconds:g} s (virtual); "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    jobs = [(args, seed) for seed in args.seeds]
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers > 1:  # one process per seed, as many at once as there are cores
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            runs = pool.map(one_seed, jobs, chunksize=1)
    else:
        runs = [one_seed(job) for job in jobs]
    for lines, _ in runs:
        print("\n".join(lines))
    results = [figures for _, figures in runs]
    worst = max(r["makespan"] / r["bound_drawn"] for r in results)
    verdict = "met" if worst <= TARGET else f"missed by {worst / TARGET - 1:.1%}"
    print(f"worst ratio to the drawn bound {worst:.3f}x (target <= {TARGET:.2f}x: {verdict}); "
          f"invariant violations {sum(int(r['violations']) for r in results)}")


if __name__ == "__main__":
    main()
