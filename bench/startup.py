"""Benchmark: `upgrader run`'s start, from a fresh process to the end of its first pass, beside a bare
client LISTing the same collections once, each in a fresh process, alternating.

    .venv/bin/python bench/startup.py [--nodes 15000] [--rounds 3]

The emulator process serves the generated fleet (bench/fleet_server.py: the rollout paused, so the
first pass starts nothing). The start runs what `run_until_signalled` runs before its loop: the
controller as `upgrader run` builds it, the watch-fed copy made, the policy check (whose lists seed
the copy), the watches started, then one pass (leader election on), and the Lease released as a
stopped `upgrader run` releases it, so each round starts as a cold start does: with the Lease free,
the first pass reads the copy the check's lists seeded. The bare client fetches and
decodes the nodes, driver pods, driver DaemonSets, their ControllerRevisions and the PDBs, once each.
Prints the medians of both, whole processes (interpreter start and imports included), and the ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from controller_rss import BARE  # the same five lists, fetched and decoded once each
from livefleet import Fleet, measure

START = """
import sys, threading
from upgrader.controller.runner import build_controller, check_policy_against_cluster, make_cache, start_watches
from upgrader.controller.settings import Settings, load_policy
from upgrader.kube.client import api_client
controller = build_controller(api_client(sys.argv[1]), load_policy(None), Settings(identity="bench-startup"))
stop, wake = threading.Event(), threading.Event()
make_cache(controller, wake)
check_policy_against_cluster(controller)
start_watches(controller, stop, wake)
controller.freeze_heap = True  # as run_until_signalled sets it
report = controller.reconcile()
stop.set()
controller.elector.release()  # as `upgrader run` does when stopped: the next round finds the Lease free
sys.exit(0 if report.error is None and report.status is not None else 1)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=15000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        fleet = Fleet.start(args.nodes, args.pods_per_node, Path(tmp))
        try:
            info = fleet.info
            print(f"emulator: {args.nodes} nodes, {info['objects']} objects loaded in {info['load_seconds']} s")
            starts, bares = [], []
            for _ in range(args.rounds):  # alternate, so both see the same machine
                starts.append(measure([sys.executable, "-c", START, str(fleet.kubeconfig)]))
                bares.append(measure([sys.executable, "-c", BARE, fleet.url]))
                print(f"  round: start {starts[-1][0]:.2f} s ({starts[-1][1]:.0f} MiB), "
                      f"bare lists {bares[-1][0]:.2f} s ({bares[-1][1]:.0f} MiB)", flush=True)
        finally:
            fleet.stop()
    start, start_rss = statistics.median(w for w, _ in starts), statistics.median(r for _, r in starts)
    bare, bare_rss = statistics.median(w for w, _ in bares), statistics.median(r for _, r in bares)
    print(f"start to the end of the first pass: median {start:.2f} s, peak RSS {start_rss:.0f} MiB")
    print(f"bare client, each collection once:  median {bare:.2f} s, peak RSS {bare_rss:.0f} MiB")
    print(f"ratio {start / bare:.2f}x (target <= 2.00x); rounds {args.rounds}; date {time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    main()
