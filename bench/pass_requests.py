"""Benchmark: requests and CPU time per reconcile pass at 100, 1,000 and 5,000 nodes (~30 pods each).

    .venv/bin/python bench/pass_requests.py [--sizes 100,1000,5000] [--rounds 7] [--in-progress 4]

Each fleet is served by its own emulator process (bench/fleet_server.py: every node
`upgrade-required`, the rollout paused, so a pass starts nothing) and reconciled by its own
controller process (bench/pass_runner.py, built as `upgrader run` builds it, leader election on).
Passes alternate between the sizes, so every size sees the same machine noise. Per pass it records
the requests sent (the controller's `KubeApi.stats`, cross-checked against the emulators' audit
logs), the controller process's CPU time (`time.process_time`) and wall time.

Two phases: idle (nothing in progress), then with `--in-progress` nodes labelled
`pod-deletion-required`. The first pass after labelling acts (evicts the nodes' GPU pods); the
passes after it wait for the evicted pods to terminate (the emulators' clocks stand still). The rule
checked: an idle pass sends the same number of requests at every size, and a pass with k nodes in
progress at most 2k more. Target: a pass's CPU time under 200 ms at 5,000 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from livefleet import Controller, Fleet, reads, total

CPU_TARGET_MS = 200.0


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def verbs(passes: list[dict[str, Any]]) -> str:
    """The verbs of the pass with the median request count, e.g. `list 5, get 2, update 1`."""
    middle = sorted(passes, key=lambda p: total(p["requests"]))[len(passes) // 2]
    return ", ".join(f"{v} {n}" for v, n in sorted(middle["requests"].items(), key=lambda kv: (-kv[1], kv[0])))


def audit_count(path: Path) -> int:
    """Requests the emulator logged from the benchmark's controller."""
    with path.open(encoding="utf-8") as log:
        return sum(1 for line in log if "bench-controller" in json.loads(line).get("user_agent", ""))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--in-progress", type=int, default=4)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    k = args.in_progress
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"sizes {sizes}, {args.pods_per_node} pods per node, {args.rounds} rounds, {k} nodes in progress")
    with tempfile.TemporaryDirectory(prefix="pass-requests-") as tmp:
        work = Path(tmp)
        fleets, controllers = {}, {}
        try:
            for n in sizes:
                fleets[n] = Fleet.start(n, args.pods_per_node, work, work / f"audit-{n}.jsonl")
                info = fleets[n].info
                print(f"emulator {n:>5} nodes: {info['objects']} objects loaded in {info['load_seconds']} s, "
                      f"RSS {info['rss_mib']} MiB")
            for n in sizes:
                controllers[n] = Controller(fleets[n].kubeconfig)
            seen: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}

            def run(phase: str) -> dict[int, dict[str, Any]]:
                out = {}
                for n in sizes:  # alternate: one pass per size in turn
                    result = controllers[n].run_pass()
                    result["phase_name"] = phase
                    seen[n].append(result)
                    out[n] = result
                return out

            for _ in range(2):
                run("warm-up")  # the first pass creates the Lease and writes the status
            idle = [run("idle") for _ in range(args.rounds)]
            picked = [f"gpu-{i:05d}" for i in range(k)]
            for n in sizes:
                fleets[n].label(picked, "pod-deletion-required")
            acting = run("acting")
            steady = [run("in-progress") for _ in range(args.rounds)]
            for n in sizes:
                controllers[n].stop()
            for n in sizes:
                logged, counted = audit_count(work / f"audit-{n}.jsonl"), sum(total(p["requests"]) for p in seen[n])
                if logged != counted:
                    raise SystemExit(f"{n} nodes: emulator logged {logged} controller requests, stats {counted}")
        finally:
            for c in controllers.values():
                c.stop()
            for f in fleets.values():
                f.stop()

    print("request counts cross-checked: each emulator's audit log holds exactly the requests the controller counted")
    print()
    print("| nodes | idle pass: requests | with k in progress: first pass | then per pass | extra per node | "
          "CPU idle | CPU in progress | wall idle | controller peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    idle_totals = {}
    ok = True
    for n in sizes:
        idle_n = [r[n] for r in idle]
        steady_n = [r[n] for r in steady]
        idle_total = median([total(p["requests"]) for p in idle_n])
        steady_total = median([total(p["requests"]) for p in steady_n])
        idle_totals[n] = {total(p["requests"]) for p in idle_n}
        extra = (steady_total - idle_total) / k if k else 0.0
        ok &= steady_total - idle_total <= 2 * k
        print(
            f"| {n:,} | {idle_total:.0f} ({verbs(idle_n)}) | {total(acting[n]['requests'])} "
            f"({verbs([acting[n]])}; reads {reads(acting[n]['requests'])}) | {steady_total:.0f} ({verbs(steady_n)}) "
            f"| {extra:+.2f} | {median([p['cpu_ms'] for p in idle_n]):.0f} ms "
            f"| {median([p['cpu_ms'] for p in steady_n]):.0f} ms | {median([p['wall_ms'] for p in idle_n]):.0f} ms "
            f"| {max(p['rss_mib'] for p in seen[n]):.0f} MiB |"
        )
    print()
    same = len({v for values in idle_totals.values() for v in values}) == 1
    print(f"idle pass requests, every pass at every size: {sorted({v for s in idle_totals.values() for v in s})} "
          f"-> {'the same' if same else 'NOT the same'} at every size")
    print(f"with {k} in progress: at most 2 more per node -> {'holds' if ok else 'DOES NOT hold'}")
    big = max(sizes)
    cpu_idle = median([r[big]["cpu_ms"] for r in idle])
    cpu_busy = median([r[big]["cpu_ms"] for r in steady])
    for name, cpu in (("idle", cpu_idle), (f"{k} in progress", cpu_busy)):
        over = f"misses by {cpu - CPU_TARGET_MS:.0f} ms ({cpu / CPU_TARGET_MS:.2f}x)"
        verdict = "meets" if cpu < CPU_TARGET_MS else over
        print(f"pass CPU at {big:,} nodes, {name}: median {cpu:.0f} ms -> {verdict} the {CPU_TARGET_MS:.0f} ms target")
    print(f"ratio of CPU per pass, {big:,} vs {min(sizes):,} nodes (idle): "
          f"{cpu_idle / median([r[min(sizes)]['cpu_ms'] for r in idle]):.1f}x for {big / min(sizes):.0f}x the nodes")
    print(f"date {time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    main()
