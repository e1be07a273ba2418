"""A controller process for the live benchmarks: `upgrader run`'s controller, one pass per command.

    .venv/bin/python bench/pass_runner.py --kubeconfig K [--policy P] [--watch]

Builds the controller exactly as `upgrader run` does (`runner.build_controller`: the official
client from the kubeconfig, leader election on its Lease) and then, for every line `pass` on stdin,
runs one reconcile pass and prints one JSON line: the pass's CPU time (`time.process_time` of this
process), wall time, the requests it sent by verb (from `KubeApi.stats`, every attempt counted),
the rollout phase, and this process's peak RSS so far (VmHWM). `--watch` starts as `upgrader run`
does: the policy check (its lists seed the watch-fed copy of nodes, driver pods and budgets; its
requests are the ready line's `start_requests`), then the copy's watches, and passes read from it;
the informers send their requests through their own KubeApi, so they are not in a pass's count.
`sync RV` waits until the node cache has reached resourceVersion RV. When stdin closes it prints the
informers' request count as its last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from functools import partial

from upgrader.controller.runner import build_controller, check_policy_against_cluster, make_cache, start_watches
from upgrader.controller.settings import Settings, load_policy
from upgrader.core.model.actions import Transition
from upgrader.kube.cache import ClusterCache
from upgrader.kube.client import api_client


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
    stop, wake = threading.Event(), threading.Event()
    cache = None
    if args.watch:  # as `upgrader run` starts: the policy check's lists seed the copy, then the watches
        make_cache(controller, wake)
        check_policy_against_cluster(controller, args.policy)
        cache = start_watches(controller, stop, wake)
        controller.freeze_heap = True  # as run_until_signalled sets it
        wait_until(lambda: cache.synced)
    start_requests = sum(n for (_, outcome), n in controller.api.stats.counts.items() if outcome != "unreachable")

    def watch_requests() -> int:  # the informers' (they have their own KubeApi)
        if cache is None:
            return 0
        return sum(n for (_, outcome), n in cache.nodes.api.stats.counts.items() if outcome != "unreachable")

    stats = controller.api.stats.counts
    ready = {"ready": True, "rss_mib": round(peak_rss_mib(), 1), "start_requests": start_requests}
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[:1] == ["sync"] and cache is not None:
            synced = wait_until(partial(caught_up, cache, int(command[1])))
            print(json.dumps({"synced": synced}), flush=True)
            continue
        if command != ["pass"]:
            break
        before = dict(stats)
        cpu, wall = time.process_time(), time.perf_counter()
        report = controller.reconcile()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        # A request sent on a kept-alive connection the server had closed meanwhile (it answers
        # "unreachable" and is sent again) never reached the emulator: counted apart, so that the
        # cross-check against the emulator's audit log holds.
        sent: dict[str, int] = {}
        lost = 0
        for (verb, outcome), count in stats.items():
            more = count - before.get((verb, outcome), 0)
            if more and outcome == "unreachable":
                lost += more
            elif more:
                sent[verb] = sent.get(verb, 0) + more
        print(
            json.dumps(
                {
                    "cpu_ms": round(cpu * 1000, 1),
                    "wall_ms": round(wall * 1000, 1),
                    "requests": sent,
                    "unreachable": lost,
                    "phase": report.status.phase.value if report.status is not None else None,
                    "started": sorted(
                        o.action.node for o in report.outcomes
                        if o.ok and isinstance(o.action, Transition) and o.action.source == "upgrade-required"
                    ),
                    "error": report.error,
                    "leader": report.leader,
                    "rss_mib": round(peak_rss_mib(), 1),
                }
            ),
            flush=True,
        )
    stop.set()
    print(json.dumps({"watch_requests": watch_requests()}), flush=True)


def caught_up(cache: ClusterCache, version: int) -> bool:
    return cache.nodes.synced and int(cache.nodes.version or 0) >= version


def wait_until(condition: Callable[[], bool], seconds: float = 600.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


if __name__ == "__main__":
    main()
