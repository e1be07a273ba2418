"""Benchmark: requests and CPU time per reconcile pass at 1,000, 5,000 and 15,000 nodes (~30 pods each).

    .venv/bin/python bench/pass_requests.py [--sizes 1000,5000,15000] [--rounds 3] [--in-progress 4]

Each fleet is served by its own emulator process (bench/fleet_server.py: every node
`upgrade-required`, the rollout paused, so a pass starts nothing) and reconciled by its own
controller process (bench/pass_runner.py, built as `upgrader run` builds it, leader election on),
in three modes, each on its own emulator: `lists` (every pass LISTs nodes, driver pods and budgets),
`cache` (the watch-fed cache `upgrader run` keeps; passes read them from it) and `wait` (the same
under `gpuCapacity.onInsufficient: wait`, whose cache also holds the fleet's GPU pods).
Passes alternate between sizes and modes, so all see the same machine noise. Per pass it records
the requests sent (the controller's `KubeApi.stats`, cross-checked against the emulators' audit
logs), the controller process's CPU time (`time.process_time`) and wall time.

Two phases: idle (nothing in progress), then with `--in-progress` nodes labelled
`pod-deletion-required`. The first pass after labelling acts (evicts the nodes' GPU pods); the
passes after it wait for the evicted pods to terminate (the emulators' clocks stand still). Then the
rollout is resumed (`upgrader resume`) and each pass judges a start (under `wait`, against the room
its evicted pods would find): every mode's policy leaves one slot beside the k nodes in progress
(maxParallelUpgrades k+1), and the node a pass starts is labelled `upgrade-required` again after it,
so the next pass judges it again. The rule checked: an idle pass sends the same number of requests at every size, and a
pass with k nodes in progress at most 2k more. Targets (issue 24): at 15,000 nodes a pass's CPU time
at most 150 ms idle and with 4 in progress, and under `wait` at most 1.5x the CPU and 1.3x the RSS of
the default pass.
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

CPU_TARGET_MS = 150.0


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


# every pass LISTs nodes and driver pods / reads them from the watch-fed cache / the same, under
# gpuCapacity.onInsufficient: wait (the cache also holds the fleet's GPU pods, kube/room_copy.py)
MODES = ("lists", "cache", "wait")
# One free slot beside the k nodes in progress, so that each pass after the resume judges a start.
POLICY = "maxParallelUpgrades: {slots}\n"
WAIT_POLICY = POLICY + "gpuCapacity:\n  onInsufficient: wait\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,5000,15000")
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-progress", type=int, default=4)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    k = args.in_progress
    runs = [(n, mode) for n in sizes for mode in MODES]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"sizes {sizes}, {args.pods_per_node} pods per node, {args.rounds} rounds, {k} nodes in progress")
    with tempfile.TemporaryDirectory(prefix="pass-requests-") as tmp:
        work = Path(tmp)
        fleets, controllers, watched = {}, {}, {}
        try:
            for n, mode in runs:  # one emulator per controller: each acts on its own fleet
                fleets[n, mode] = Fleet.start(n, args.pods_per_node, work, work / f"audit-{n}-{mode}.jsonl", f"-{mode}")
                info = fleets[n, mode].info
                print(f"emulator {n:>5} nodes ({mode}): {info['objects']} objects loaded in {info['load_seconds']} s, "
                      f"RSS {info['rss_mib']} MiB")
            policies = {"default": work / "default.yaml", "wait": work / "wait.yaml"}
            policies["default"].write_text(POLICY.format(slots=k + 1), encoding="utf-8")
            policies["wait"].write_text(WAIT_POLICY.format(slots=k + 1), encoding="utf-8")
            for n, mode in runs:
                chosen = str(policies["wait" if mode == "wait" else "default"])
                controllers[n, mode] = Controller(fleets[n, mode].kubeconfig, watch=mode != "lists", policy=chosen)
            seen: dict[tuple[int, str], list[dict[str, Any]]] = {r: [] for r in runs}

            def run(phase: str) -> dict[tuple[int, str], dict[str, Any]]:
                out = {}
                for r in runs:  # alternate: one pass per size and mode in turn
                    result = controllers[r].run_pass()
                    result["phase_name"] = phase
                    seen[r].append(result)
                    out[r] = result
                return out

            for _ in range(2):
                run("warm-up")  # the first pass creates the Lease and writes the status
            idle = [run("idle") for _ in range(args.rounds)]
            picked = [f"gpu-{i:05d}" for i in range(k)]
            for r in runs:
                version = fleets[r].label(picked, "pod-deletion-required")
                if r[1] != "lists":
                    controllers[r].sync(version)  # the cache has seen the labels before the next pass
            acting = run("acting")
            steady = [run("in-progress") for _ in range(args.rounds)]
            for r in runs:  # resumed (each pass GETs the status ConfigMap): the next pass judges starts
                fleets[r].resume()
            judgings = []
            for _ in range(args.rounds):
                judgings.append(run("judging"))
                for r in runs:  # the node started goes back to upgrade-required: the next pass judges again
                    if started := judgings[-1][r]["started"]:
                        version = fleets[r].label(started, "upgrade-required")
                        if r[1] != "lists":
                            controllers[r].sync(version)
            for r in runs:
                watched[r] = controllers[r].stop().get("watch_requests", 0)
            for r in runs:
                logged = audit_count(work / f"audit-{r[0]}-{r[1]}.jsonl")
                started = controllers[r].info.get("start_requests", 0)  # the policy check's, under --watch
                counted = sum(total(p["requests"]) for p in seen[r]) + watched[r] + started
                if logged != counted:
                    raise SystemExit(f"{r}: emulator logged {logged} controller requests, stats {counted}")
        finally:
            for c in controllers.values():
                c.stop()
            for f in fleets.values():
                f.stop()

    print("request counts cross-checked: each emulator's audit log holds exactly the requests the controller "
          "counted (the start's policy check, passes, and the cache's list and watch requests)")
    lost = {r: sum(p.get("unreachable", 0) for p in seen[r]) for r in runs}
    if any(lost.values()):
        print("sent again after the emulator had closed the kept-alive connection (not in the counts): "
              + ", ".join(f"{n} {mode} {count}" for (n, mode), count in lost.items() if count))
    print()
    print("| nodes | reads | idle pass: requests | with k in progress: first pass | then per pass | extra per node "
          "| CPU idle | CPU in progress | wall idle | controller peak RSS | cache requests, whole run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    idle_totals: dict[str, set[int]] = {mode: set() for mode in MODES}
    ok = True
    for n, mode in runs:
        idle_n = [r[n, mode] for r in idle]
        steady_n = [r[n, mode] for r in steady]
        idle_total = median([total(p["requests"]) for p in idle_n])
        steady_total = median([total(p["requests"]) for p in steady_n])
        idle_totals[mode] |= {total(p["requests"]) for p in idle_n}
        extra = (steady_total - idle_total) / k if k else 0.0
        ok &= steady_total - idle_total <= 2 * k
        first = acting[n, mode]
        print(
            f"| {n:,} | {mode} | {idle_total:.0f} ({verbs(idle_n)}) | {total(first['requests'])} "
            f"({verbs([first])}; reads {reads(first['requests'])}) | {steady_total:.0f} ({verbs(steady_n)}) "
            f"| {extra:+.2f} | {median([p['cpu_ms'] for p in idle_n]):.0f} ms "
            f"| {median([p['cpu_ms'] for p in steady_n]):.0f} ms | {median([p['wall_ms'] for p in idle_n]):.0f} ms "
            f"| {max(p['rss_mib'] for p in seen[n, mode]):.0f} MiB | {watched[n, mode]} |"
        )
    print()
    for mode in MODES:
        counts = sorted(idle_totals[mode])
        verdict = "the same" if len(counts) == 1 else "NOT the same"
        print(f"idle pass requests ({mode}), every pass at every size: {counts} -> {verdict} at every size")
    print(f"with {k} in progress: at most 2 more per node -> {'holds' if ok else 'DOES NOT hold'}")
    big, small = max(sizes), min(sizes)
    cpu = {
        (mode, phase): median([r[big, mode]["cpu_ms"] for r in rounds])
        for mode in MODES
        for phase, rounds in (("idle", idle), ("busy", steady))
    }
    for mode in MODES:
        for phase, name in (("idle", "idle"), ("busy", f"{k} in progress")):
            value = cpu[mode, phase]
            over = f"misses by {value - CPU_TARGET_MS:.0f} ms ({value / CPU_TARGET_MS:.2f}x)"
            verdict = "meets" if value < CPU_TARGET_MS else over
            print(f"pass CPU at {big:,} nodes, {mode}, {name}: median {value:.0f} ms -> {verdict} "
                  f"the {CPU_TARGET_MS:.0f} ms target")
    print(f"CPU per pass at {big:,} nodes, lists / cache: idle {cpu['lists', 'idle'] / cpu['cache', 'idle']:.2f}x, "
          f"{k} in progress {cpu['lists', 'busy'] / cpu['cache', 'busy']:.2f}x")
    for mode in MODES:
        ratio = median([r[big, mode]["cpu_ms"] for r in idle]) / median([r[small, mode]["cpu_ms"] for r in idle])
        print(f"CPU per pass ({mode}), {big:,} vs {small:,} nodes (idle): {ratio:.1f}x "
              f"for {big / small:.0f}x the nodes")
    print()
    print("the passes after resuming, which judge starts (under wait against the room); nodes started each:")
    judging = {}
    for n, mode in runs:
        passes = [j[n, mode] for j in judgings]
        if any(p["phase"] == "Paused" for p in passes):
            raise SystemExit(f"{n} {mode}: still paused after `upgrader resume`: no start was judged")
        judging[n, mode] = {"cpu_ms": median([p["cpu_ms"] for p in passes])}
        print(f"  {n:,} {mode}: CPU median {judging[n, mode]['cpu_ms']:.0f} ms "
              f"({', '.join(str(round(p['cpu_ms'])) for p in passes)}), requests {total(passes[0]['requests'])} "
              f"({verbs(passes[:1])}) in the first, started {[len(p['started']) for p in passes]}")
    rss = {mode: max(p["rss_mib"] for p in seen[big, mode]) for mode in MODES}
    print(f"at {big:,} nodes, wait / cache: CPU idle {cpu['wait', 'idle'] / cpu['cache', 'idle']:.2f}x, "
          f"{k} in progress {cpu['wait', 'busy'] / cpu['cache', 'busy']:.2f}x, judging "
          f"{judging[big, 'wait']['cpu_ms'] / judging[big, 'cache']['cpu_ms']:.2f}x; peak RSS "
          f"{rss['wait'] / rss['cache']:.2f}x ({rss['wait']:.0f} vs {rss['cache']:.0f} MiB)")
    print(f"date {time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    main()
