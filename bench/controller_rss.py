"""Benchmark: the controller's peak RSS against 5,000 nodes and 150,000 pods in an emulator process.

    .venv/bin/python bench/controller_rss.py [--nodes 5000] [--pods-per-node 30] [--rounds 5] [--passes 5]

The emulator (bench/fleet_server.py) runs in its own process with the generated fleet, four nodes
labelled `pod-deletion-required` so passes also list and evict pods. Each round starts, in fresh
processes and alternating:
- the controller as `upgrader run` builds it (bench/pass_runner.py --watch: leader election, the
  watch-fed cache of nodes and driver pods listed and followed) doing `--passes` reconcile passes;
  its peak RSS is VmHWM;
- a bare Python process that fetches and decodes the same LIST responses a pass reads, once
  (the memory of holding the data a pass needs, with no client library or controller code).
Prints medians of both and their ratio; target: the controller under 250 MB.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from livefleet import Controller, Fleet

TARGET_MB = 250.0
BARE = """
import json, sys, urllib.request
paths = ["/api/v1/nodes", "/apis/apps/v1/namespaces/gpu-operator/daemonsets",
         "/apis/apps/v1/namespaces/gpu-operator/controllerrevisions",
         "/api/v1/namespaces/gpu-operator/pods?labelSelector=app%3Dnvidia-driver-daemonset",
         "/apis/policy/v1/poddisruptionbudgets"]
held = [json.loads(urllib.request.urlopen(sys.argv[1] + p).read()) for p in paths]
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(int(hwm.split()[1]) / 1024)
"""


def controller_round(kubeconfig: Path, passes: int) -> float:
    controller = Controller(kubeconfig, watch=True)
    try:
        peak = max(controller.run_pass()["rss_mib"] for _ in range(passes))
    finally:
        controller.stop()
    return float(peak)


def bare_round(url: str) -> float:
    out = subprocess.run([sys.executable, "-c", BARE, url], capture_output=True, text=True, check=True)
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="controller-rss-") as tmp:
        fleet = Fleet.start(args.nodes, args.pods_per_node, Path(tmp))
        try:
            info = fleet.info
            print(f"emulator: {args.nodes} nodes, {info['objects']} objects loaded in {info['load_seconds']} s "
                  f"(emulator RSS {info['rss_mib']} MiB)")
            fleet.label([f"gpu-{i:05d}" for i in range(4)], "pod-deletion-required")
            controllers, bares = [], []
            for _ in range(args.rounds):  # alternate, so both see the same machine
                controllers.append(controller_round(fleet.kubeconfig, args.passes))
                bares.append(bare_round(fleet.url))
                print(f"  round: controller {controllers[-1]:.0f} MiB, bare lists {bares[-1]:.0f} MiB", flush=True)
        finally:
            fleet.stop()
    ctl, bare = statistics.median(controllers), statistics.median(bares)
    mb = ctl * 2**20 / 1e6
    print(f"controller peak RSS ({args.passes} passes, watches open): median {ctl:.0f} MiB ({mb:.0f} MB)")
    print(f"bare process holding the same lists:        median {bare:.0f} MiB")
    print(f"ratio {ctl / bare:.2f}x; target < {TARGET_MB:.0f} MB -> {'met' if mb < TARGET_MB else 'MISSED'}")
    print(f"rounds {args.rounds}; date {time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    main()
