"""Serve a generated fleet from an emulator in its own process, for the live benchmarks.

    .venv/bin/python bench/fleet_server.py --nodes 5000 [--pods-per-node 30] --kubeconfig K [--audit-log F]

Loads `largefleet.paused_rollout` (every node `upgrade-required`, the rollout paused, the driver
DaemonSets one revision ahead of their pods) with the bulk loader, serves it over HTTP on loopback,
writes a kubeconfig for it and prints one JSON line (`url`, `objects`, `load_seconds`, `rss_mib`)
once it is ready. Runs until SIGTERM/SIGINT or until its stdin closes, so it never outlives the
benchmark that started it.

The emulator's clock is virtual and never advanced: nothing in the emulated cluster moves on its
own (an evicted pod stays terminating), so successive passes of a controller see the same cluster
apart from what they themselves write.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import sys
import threading
import time
from types import FrameType

from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.largefleet import paused_rollout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--audit-log")
    args = parser.parse_args()
    audit = open(args.audit_log, "a", encoding="utf-8") if args.audit_log else None  # noqa: SIM115
    cluster = EmulatedCluster.virtual(audit=audit)
    started = time.perf_counter()
    count = cluster.load(paused_rollout(args.nodes, args.pods_per_node))
    loaded = time.perf_counter() - started
    url = cluster.serve()
    cluster.write_kubeconfig(args.kubeconfig)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"url": url, "objects": count, "load_seconds": round(loaded, 2), "rss_mib": round(rss)}),
          flush=True)
    stop.wait()
    cluster.stop()


if __name__ == "__main__":
    main()
