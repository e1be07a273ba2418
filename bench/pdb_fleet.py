"""Benchmark (issue 26): a 300-node, 3-zone fleet whose inference services sit behind
PodDisruptionBudgets, rolled out before and after the 500-node-fleet work, side by side, same seeds.

    .venv/bin/python bench/pdb_fleet.py [--nodes 300] [--seeds 1 2]

Subjects, each in a process of its own (so each imports its own `upgrader`):
- before: the code at BEFORE (the commit before issue 26), extracted under bench/.data/, with the
  policy maxParallelUpgrades 20, maxUnavailable 10%, canary zone us-east-1a;
- after, same policy: this tree with the same policy (what the per-PDB eviction backoff alone does);
- after, new keys: this tree, the same policy plus canaryNodes 5%, pdbAwareStarts and
  taintPendingNodes;
- after, no canaryNodes: the same, the canary still the whole zone (what the other two keys do).

The fleet (`build_spread`, 100 nodes a zone, 8 GPUs each; the node's training Job holds 4): SERVICES
inference services, each a ReplicaSet of one 1-GPU pod on every node of its share of the fleet
(placed round-robin, so every node runs one replica) behind a PodDisruptionBudget maxUnavailable 1.
An evicted replica comes back Pending and the emulator's scheduler places it (cordons, taints and
free GPUs as kube-scheduler's filters, PreferNoSchedule as its TaintToleration score); it is Ready
`workload_ready_delay` later, which is when its budget allows the next eviction. The controller runs
in-process on the virtual clock, a pass every second. Figures per run:
- makespan: first start to last upgrade-done (virtual seconds);
- idle cordoned node-seconds: per node, from entering pod-deletion-required to the last eviction of
  an inference replica on it (the node cordoned, its GPUs idle, waiting on a budget, whether its
  evictions were refused or held back), summed over the nodes;
- evictions refused: eviction requests answered 429;
- pods disrupted twice: evictions of replicas that were themselves placed during the rollout,
  after an eviction (each is a service replica disrupted a second time); and of those, the ones
  the scheduler had placed on a node still to upgrade while an upgraded, schedulable node had a free
  GPU (`twice_with_room`: the avoidable ones).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "25bdb2b"  # the last commit before issue 26's first (9726200)
DATA = ROOT / "bench" / ".data"
SERVICES = 10
POLICY: dict[str, Any] = {
    "maxParallelUpgrades": 20,
    "maxUnavailable": "10%",
    "failureDomains": {"canary": "us-east-1a"},
}
NEW_KEYS: dict[str, Any] = {
    "failureDomains": {"canary": "us-east-1a", "canaryNodes": "5%"},
    "pdbAwareStarts": True,
    "taintPendingNodes": {"enable": True},
}
SUBJECTS = {
    "before": ("before", POLICY),
    "after, same policy": ("after", POLICY),
    "after, new keys": ("after", {**POLICY, **NEW_KEYS}),
    # the new keys but the canary in nodes: what pdbAwareStarts and taintPendingNodes do alone
    "after, no canaryNodes": ("after", {**POLICY, **NEW_KEYS, "failureDomains": POLICY["failureDomains"]}),
}
FIGURES = ("makespan", "idle_node_seconds", "refused", "disrupted_twice", "twice_with_room")


def code_before() -> Path:
    """The `upgrader` package as it was at BEFORE, extracted once (git archive)."""
    target = DATA / f"upgrader-{BEFORE}"
    if not (target / "upgrader").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        archive = target / "code.tar"
        with archive.open("wb") as out:
            subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE, "upgrader"], stdout=out, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        archive.unlink()
    return target


def use_code(path: Path) -> None:
    """Import `upgrader` from `path` instead of this tree (the editable install's finder stood first)."""
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, str(path))


def one_run(policy_map: dict[str, Any], nodes: int, seed: int) -> dict[str, float]:
    """One rollout in this process, with whichever `upgrader` it imports."""
    from upgrader.controller.loop import Controller
    from upgrader.controller.settings import Settings
    try:
        from upgrader.core.policy.policy import policy_from_mapping
    except ModuleNotFoundError:  # the tree before the rooms of core/ (issue 27): core/policy.py
        from upgrader.core.policy import policy_from_mapping  # type: ignore[no-redef]
    from upgrader.kube.api import KubeApi
    from upgrader.sim.apiserver.podutil import gpu_request as gpus
    from upgrader.sim.apiserver.podutil import is_terminal as terminal
    from upgrader.sim.cluster import EmulatedCluster
    from upgrader.sim.controllers.settings import GPU, SimSettings
    from upgrader.sim.fleets.builders import pod_object
    from upgrader.sim.fleets.spread import build_spread
    from upgrader.sim.proving.invariants import RolloutRecorder
    from upgrader.sim.proving.makespan import timeline
    from upgrader.sim.proving.recording import LABEL as STATE_LABEL

    settings = SimSettings(jitter=1.0, seed=seed, pod_recreate_delay=5.0, pod_ready_delay=60.0,
                           validator_ready_delay=20.0, workload_ready_delay=20.0)
    cluster = EmulatedCluster.virtual(settings=settings, seed=seed)
    info = build_spread(cluster, nodes, 3, gpu_grace=30.0)
    cluster.create("namespaces", {"metadata": {"name": "inference"}})
    initial: set[str] = set()
    for s in range(SERVICES):
        app = f"svc-{s}"
        cluster.create("poddisruptionbudgets", {"metadata": {"name": app},
                                                "spec": {"selector": {"matchLabels": {"app": app}},
                                                         "maxUnavailable": 1}}, "inference", "policy")
    for i, node in enumerate(info.nodes):
        app = f"svc-{i % SERVICES}"
        name = f"{app}-{i:04d}"
        cluster.create("pods", pod_object(name, node, {"app": app}, "nvcr.io/nvidia/tritonserver:24.05-py3", 1,
                                          ("apps/v1", "ReplicaSet", app)), "inference")
        initial.add(name)
    cluster.store.run_due()
    recorder = RolloutRecorder(cluster)
    node_of: dict[str, str] = {}  # inference pod -> the node it was bound to

    placed_badly: set[str] = set()  # replicas bound to a node still to upgrade while an upgraded one had room
    nodes_type = cluster.type("nodes")

    def room_on_upgraded() -> bool:
        for n in cluster.store.objects(nodes_type):
            labels = n["metadata"].get("labels") or {}
            if labels.get(STATE_LABEL) != "upgrade-done" or (n.get("spec") or {}).get("unschedulable"):
                continue
            held = sum(gpus(p) for p in cluster.store.pods_on(n["metadata"]["name"]) if not terminal(p))
            if int(n["status"]["allocatable"].get(GPU, 0)) - held >= 1:
                return True
        return False

    def follow(change: Any) -> None:
        if change.key == ("", "pods") and change.new["metadata"].get("namespace") == "inference":
            bound = (change.new.get("spec") or {}).get("nodeName")
            was = ((change.old or {}).get("spec") or {}).get("nodeName")
            if bound:
                node_of[change.new["metadata"]["name"]] = bound
            if bound and not was and change.old is not None:  # the scheduler bound a replacement
                target = cluster.store.get(nodes_type, None, bound) or {}
                if (target.get("metadata", {}).get("labels") or {}).get(STATE_LABEL) != "upgrade-done" \
                        and room_on_upgraded():
                    placed_badly.add(change.new["metadata"]["name"])

    for pod in cluster.store.objects(cluster.type("pods"), "inference"):
        node_of[pod["metadata"]["name"]] = pod["spec"]["nodeName"]
    cluster.store.reactors.append(follow)
    policy = policy_from_mapping(policy_map)
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy, Settings(identity="bench"), cluster.store.clock.now)
    start = len(cluster.requests)
    wall = time.perf_counter()
    passes = 0
    while passes < 40_000:
        report = controller.reconcile()
        passes += 1
        if done_count(report.status) == nodes:
            break
        cluster.advance(1.0)
    seen = timeline(recorder, info.nodes)
    evictions = [r for r in cluster.requests[start:] if r.subresource == "eviction"]
    refused = sum(1 for r in evictions if r.status == 429)
    twice = sum(1 for r in evictions if r.status in (200, 201) and r.namespace == "inference"
                and r.name not in initial)
    avoidable = sum(1 for r in evictions if r.status in (200, 201) and r.name in placed_badly)
    violations = recorder.check(policy, info.domain_of, "us-east-1a", ["us-east-1a", "us-east-1b", "us-east-1c"])
    return {"makespan": seen.makespan, "idle_node_seconds": idle_node_seconds(recorder, evictions, node_of),
            "refused": float(refused), "disrupted_twice": float(twice), "twice_with_room": float(avoidable),
            "violations": float(len(violations)),
            "passes": float(passes), "wall": time.perf_counter() - wall}


def idle_node_seconds(recorder: Any, evictions: list[Any], node_of: dict[str, str]) -> float:
    """Seconds cordoned nodes waited on a PodDisruptionBudget: per node, from entering
    pod-deletion-required to the last eviction of an inference replica on it (0 when it went at
    once), summed. Refused (429) or held back, the node sits cordoned with its GPUs idle all the same."""
    entered: dict[str, float] = {}
    for r in recorder.records:
        if r.state == "pod-deletion-required" and r.node not in entered:
            entered[r.node] = r.time
    last: dict[str, float] = {}
    for r in evictions:
        node = node_of.get(r.name)
        if node is not None and r.status in (200, 201):
            last[node] = max(last.get(node, r.time), r.time)
    return sum(max(0.0, last[n] - entered[n]) for n in last if n in entered)


def done_count(status: Any) -> int:
    """Nodes upgrade-done in a pass's status: a RolloutStatus, or the dict of the trees before it (issue 27)."""
    if status is None:
        return 0
    by_state = status.get("nodes_by_state") or {} if isinstance(status, dict) else status.nodes_by_state
    return int(by_state.get("upgrade-done", 0))


def subject_process(subject: str, nodes: int, seed: int) -> dict[str, float]:
    code = SUBJECTS[subject][0]
    argv = [sys.executable, __file__, "--one", subject, "--nodes", str(nodes), "--seeds", str(seed)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if code == "before":
        argv += ["--code", str(code_before())]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{subject} seed {seed} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--one", choices=list(SUBJECTS), help=argparse.SUPPRESS)
    parser.add_argument("--code", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        if args.code is not None:
            use_code(args.code)
        print(json.dumps(one_run(SUBJECTS[args.one][1], args.nodes, args.seeds[0])))
        return
    print(f"{args.nodes} nodes in 3 zones, {SERVICES} services behind PDBs maxUnavailable 1; before = {BEFORE}; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}")
    results: dict[str, list[dict[str, float]]] = {s: [] for s in SUBJECTS}
    for seed in args.seeds:  # the subjects alternate, seed by seed, so all see the same machine
        for subject in SUBJECTS:
            figures = subject_process(subject, args.nodes, seed)
            results[subject].append(figures)
            print(f"seed {seed} {subject:<20} " + ", ".join(f"{k} {figures[k]:.0f}" for k in
                                                            (*FIGURES, "violations", "passes", "wall")), flush=True)
    print("\nmedians over the seeds:")
    base = {k: statistics.median(r[k] for r in results["before"]) for k in FIGURES}
    for subject, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in FIGURES}
        ratios = ", ".join(f"{k} {med[k]:.0f} ({med[k] / base[k]:.2f}x)" if base[k] else f"{k} {med[k]:.0f}"
                           for k in FIGURES)
        print(f"  {subject:<20} {ratios}")


if __name__ == "__main__":
    main()
