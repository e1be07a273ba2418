"""Benchmark: `upgrader plan --from-file` on a generated 5,000-node / 150,000-pod kubectl List,
side by side with `json.load` of the same file, each in a fresh process.

    .venv/bin/python bench/plan_bench.py [--nodes 5000] [--pods-per-node 30] [--rounds 5]

Prints medians of wall time and peak RSS for both and their ratios (target: within 1.5x on both).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from livefleet import ROOT, measure

DATA = ROOT / "bench" / ".data"

LOAD = "import json,sys; json.load(open(sys.argv[1], 'rb'))"
PLAN = ("import sys; from upgrader.commands.cli import main; "
        "sys.stdout = open('/dev/null', 'w'); "
        "code = main(['plan', '--dry-run', '--from-file', sys.argv[1], '-o', 'json']); "
        "sys.exit(0 if code in (0, 1) else code)")


def generate(nodes: int, pods_per_node: int) -> Path:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"fleet-{nodes}x{pods_per_node}.json"
    if not path.exists():
        from upgrader.sim.fleets.largefleet import kubectl_list

        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as out:
            json.dump(kubectl_list(nodes, pods_per_node), out)
        tmp.rename(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path = generate(args.nodes, args.pods_per_node)
    items = args.nodes * (args.pods_per_node + 1)
    print(f"file {path.name}: {path.stat().st_size / 2**20:.0f} MiB, ~{items} objects; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    loads, plans = [], []
    for _ in range(args.rounds):  # alternate, so both see the same machine noise
        loads.append(measure([sys.executable, "-c", LOAD, str(path)]))
        plans.append(measure([sys.executable, "-c", PLAN, str(path)]))
    load_wall = statistics.median(w for w, _ in loads)
    load_rss = statistics.median(r for _, r in loads)
    plan_wall = statistics.median(w for w, _ in plans)
    plan_rss = statistics.median(r for _, r in plans)
    print(f"json.load : median wall {load_wall:6.2f} s   peak RSS {load_rss:7.0f} MiB")
    print(f"plan      : median wall {plan_wall:6.2f} s   peak RSS {plan_rss:7.0f} MiB")
    print(f"ratio     : wall {plan_wall / load_wall:.2f}x   RSS {plan_rss / load_rss:.2f}x   (target <= 1.50x)")
    print(f"rounds: {args.rounds}; date {time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    main()
