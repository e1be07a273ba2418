"""A controller process for the live benchmarks: `upgrader run`'s controller, one pass per command.

    .venv/bin/python bench/pass_runner.py --kubeconfig K [--policy P] [--watch]

Builds the controller exactly as `upgrader run` does (`runner.build_controller`: the official
client from the kubeconfig, leader election on its Lease) and then, for every line `pass` on stdin,
runs one reconcile pass and prints one JSON line: the pass's CPU time (`time.process_time` of this
process), wall time, the requests it sent by verb (from `KubeApi.stats`, every attempt counted),
the rollout phase, and this process's peak RSS so far (VmHWM). `--watch` also starts the watches
`upgrader run` keeps open (nodes, driver pods), as for a memory measurement; leave it off when
counting a pass's requests, since the watch threads send theirs through the same client.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from upgrader.config import Settings, load_policy
from upgrader.kube.client import api_client
from upgrader.runner import build_controller, start_watches


def peak_rss_mib() -> float:
    """VmHWM: the most resident memory this process has had."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--policy")
    parser.add_argument("--watch", action="store_true")
    args = parser.parse_args()
    settings = Settings(identity="bench-controller")
    controller = build_controller(api_client(args.kubeconfig), load_policy(args.policy), settings)
    stop = threading.Event()
    watch_stats: list[dict[tuple[str, str], int]] = []
    if args.watch:
        cache = start_watches(controller, stop, threading.Event())
        watch_stats.append(cache.nodes.api.stats.counts)
        deadline = time.monotonic() + 600
        while not (cache.nodes.synced and cache.driver_pods.synced) and time.monotonic() < deadline:
            time.sleep(0.05)
    stats = controller.api.stats.counts
    print(json.dumps({"ready": True, "rss_mib": round(peak_rss_mib(), 1)}), flush=True)
    for line in sys.stdin:
        if line.strip() != "pass":
            break
        before = dict(stats)
        cpu, wall = time.process_time(), time.perf_counter()
        report = controller.reconcile()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        sent: dict[str, int] = {}
        for (verb, _outcome), count in stats.items():
            if count - before.get((verb, _outcome), 0):
                sent[verb] = sent.get(verb, 0) + count - before.get((verb, _outcome), 0)
        print(
            json.dumps(
                {
                    "cpu_ms": round(cpu * 1000, 1),
                    "wall_ms": round(wall * 1000, 1),
                    "requests": sent,
                    "phase": report.status.get("phase"),
                    "error": report.error,
                    "leader": report.leader,
                    "rss_mib": round(peak_rss_mib(), 1),
                    "watch_requests": sum(sum(s.values()) for s in watch_stats),  # the informers', so far
                }
            ),
            flush=True,
        )
    stop.set()


if __name__ == "__main__":
    main()
