"""Benchmark: live `upgrader plan --dry-run` against an emulator with 5,000 nodes and 150,000 pods,
side by side with `kubectl get` of the same kinds, each in a fresh process.

    .venv/bin/python bench/plan_live.py [--nodes 5000] [--pods-per-node 30] [--rounds 5]

The emulator (bench/fleet_server.py) serves the generated fleet over HTTP in its own process. Each
round runs, alternating:
- `upgrader plan --dry-run --kubeconfig K -o json` (reads nodes, pods, PDBs, DaemonSets,
  ControllerRevisions and NVIDIADrivers with LIST requests, then plans);
- `kubectl get nodes,pods,pdb,daemonsets,controllerrevisions,jobs,nvidiadrivers -A -o json`
  (kubectl's defaults: pages of 500), its output thrown away;
timing the whole process (start-up included) and reading its peak RSS. Prints medians and ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from livefleet import Fleet, measure

KINDS = "nodes,pods,pdb,daemonsets,controllerrevisions,jobs,nvidiadrivers"
PLAN = ("import sys; from upgrader.commands.cli import main; sys.stdout = open('/dev/null', 'w'); "
        "code = main(['plan', '--dry-run', '--kubeconfig', sys.argv[1], '-o', 'json']); "
        "sys.exit(0 if code in (0, 1) else code)")
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise SystemExit("kubectl is not on PATH")
    version = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True)
    client = version.stdout.split('"gitVersion": "')[1].split('"')[0] if '"gitVersion"' in version.stdout else "?"
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"kubectl {client}")
    with tempfile.TemporaryDirectory(prefix="plan-live-") as tmp:
        fleet = Fleet.start(args.nodes, args.pods_per_node, Path(tmp))
        try:
            info = fleet.info
            print(f"emulator: {args.nodes} nodes, {info['objects']} objects loaded in {info['load_seconds']} s")
            config = str(fleet.kubeconfig)
            plans, gets = [], []
            for _ in range(args.rounds):  # alternate, so both see the same machine noise
                plans.append(measure([sys.executable, "-c", PLAN, config]))
                gets.append(measure([kubectl, "--kubeconfig", config, "get", KINDS, "-A", "-o", "json"]))
                print(f"  round: plan {plans[-1][0]:.1f} s / {plans[-1][1]:.0f} MiB, "
                      f"kubectl get {gets[-1][0]:.1f} s / {gets[-1][1]:.0f} MiB", flush=True)
        finally:
            fleet.stop()
    plan_wall, get_wall = statistics.median(w for w, _ in plans), statistics.median(w for w, _ in gets)
    plan_rss, get_rss = statistics.median(r for _, r in plans), statistics.median(r for _, r in gets)
    print(f"upgrader plan : median wall {plan_wall:6.1f} s   peak RSS {plan_rss:6.0f} MiB")
    print(f"kubectl get   : median wall {get_wall:6.1f} s   peak RSS {get_rss:6.0f} MiB")
    print(f"ratio (plan / kubectl get): wall {plan_wall / get_wall:.2f}x   RSS {plan_rss / get_rss:.2f}x")
    print(f"rounds {args.rounds}; date {time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    main()
