"""A lean GPU fleet of any size spread over K zones, for rollouts at scale (benchmarks, reliability).

Unlike the scenarios (`scenarios.py`: three zones, a rich mix of workloads per node), each node
here carries only the labels something reads, and only what an upgrade must deal with: its driver
and validator pods and one GPU pod (a long-running training Job's pod, pinned to the node by a
nodeSelector: once evicted it lands on no other node, and as the emulated Job controller does not
retry a pod it could not place, it is gone, which keeps a 1,000-node rollout cheap to emulate).
The GPU pod's termination grace is drawn per node from the cluster's `SimSettings` (kind
`pod_grace`), so with jitter each node drains in its own time; the draws are kept in
`SpreadInfo.grace`. Optionally every `job_every`-th node also runs a finite batch job
(`app=batch-eval`, run time drawn as `job_run`) for `waitForCompletion` to wait on. Then the driver
DaemonSets move to the new driver, so every node needs an upgrade.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any

from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import GPU, JOB_RUN_SECONDS
from upgrader.sim.fleets.builders import (
    DRIVER_REPO,
    GPUS_PER_NODE,
    KERNELS,
    NEW_DRIVER,
    OLD_DRIVER,
    OPERATOR_NS,
    PRODUCTS,
    driver_tag,
    install_operator,
    node_object,
)

Obj = dict[str, Any]

TRAIN_NS = "ml-training"
BATCH_NS = "batch"
BATCH_SELECTOR = "app=batch-eval"
TRAIN_APP = "train"
# What a lean node keeps of the labels GFD/NFD set (what the driver DaemonSets, validators, jobs and
# the controller select on or read); the rest only make every node LIST of a large fleet heavier.
LEAN_LABELS = frozenset({
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "nvidia.com/gpu.present",
    "nvidia.com/gpu.deploy.driver",
    "nvidia.com/gpu.deploy.operator-validator",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
    "feature.node.kubernetes.io/kernel-version.full",
})


def zone_names(count: int, region: str = "us-east-1") -> list[str]:
    """`us-east-1a`, `us-east-1b`, ... (up to 26 zones)."""
    if not 1 <= count <= len(string.ascii_lowercase):
        raise ValueError(f"zones must be between 1 and 26, got {count}")
    return [f"{region}{letter}" for letter in string.ascii_lowercase[:count]]


@dataclass
class SpreadInfo:
    """What `build_spread` made: nodes in order, by zone, and the per-node draws it used."""

    nodes: list[str]
    domains: dict[str, list[str]]
    driver_daemonsets: list[str]
    grace: dict[str, int] = field(default_factory=dict)  # node -> its GPU pod's termination grace (s)
    batch_jobs: dict[str, str] = field(default_factory=dict)  # node -> its finite batch job's name

    @property
    def domain_of(self) -> dict[str, str]:
        return {node: zone for zone, nodes in self.domains.items() for node in nodes}


def build_spread(
    cluster: EmulatedCluster,
    nodes: int,
    zones: int = 4,
    gpu_grace: float = 30.0,
    job_every: int = 0,
    job_seconds: float = 60.0,
) -> SpreadInfo:
    """Populate `cluster` with `nodes` GPU nodes spread evenly over `zones` zones (in contiguous
    blocks, named `gpu-<zone letter>-<nnn>`), every one a driver behind."""
    names = zone_names(zones)
    if nodes < zones:
        raise ValueError(f"nodes must be at least {zones} (one per zone), got {nodes}")
    info = SpreadInfo([], {z: [] for z in names}, [])
    width = max(2, len(str(-(-nodes // zones))))
    kernels: dict[str, str] = {}
    for ns in (OPERATOR_NS, TRAIN_NS, BATCH_NS):
        cluster.create("namespaces", {"metadata": {"name": ns}})
    for i in range(nodes):
        zone = names[i * zones // nodes]
        name = f"gpu-{zone[-1]}-{len(info.domains[zone]) + 1:0{width}d}"
        kernels[name] = KERNELS[i % len(KERNELS)]
        cluster.create("nodes", _lean(node_object(name, zone, kernels[name], PRODUCTS[(i // 2) % len(PRODUCTS)], i)))
        info.nodes.append(name)
        info.domains[zone].append(name)
    cluster.settings.registry[DRIVER_REPO] = {driver_tag(v, k) for v in (OLD_DRIVER, NEW_DRIVER) for k in KERNELS}
    info.driver_daemonsets.extend(install_operator(cluster, kernels))
    for i, node in enumerate(info.nodes):
        grace = max(1, round(cluster.settings.delay("pod_grace", node, gpu_grace)))
        info.grace[node] = grace
        _job(cluster, TRAIN_NS, f"{TRAIN_APP}-{node}", node, TRAIN_APP, "never", GPUS_PER_NODE // 2, grace)
        if job_every and i % job_every == job_every - 1:
            job = f"eval-{node}"
            _job(cluster, BATCH_NS, job, node, "batch-eval", f"{job_seconds:g}", 1, 1)
            info.batch_jobs[node] = job
    cluster.store.run_due()
    return info


def _lean(node: Obj) -> Obj:
    """The node without the labels and status nothing here reads."""
    meta, status = node["metadata"], node["status"]
    meta["labels"] = {k: v for k, v in meta["labels"].items() if k in LEAN_LABELS}
    status["capacity"] = {GPU: status["capacity"][GPU]}
    status["allocatable"] = {GPU: status["allocatable"][GPU]}
    status.pop("addresses", None)
    status["nodeInfo"] = {"kernelVersion": status["nodeInfo"]["kernelVersion"]}
    return node


def _job(
    cluster: EmulatedCluster, ns: str, name: str, node: str, app: str, seconds: str, gpus: int, grace: int
) -> None:
    """A one-pod Job on `node` (by nodeSelector, so a lost pod only comes back there, when schedulable)."""
    cluster.create(
        "jobs",
        {
            "metadata": {"name": name, "annotations": {JOB_RUN_SECONDS: seconds}},
            "spec": {
                "completions": 1,
                "parallelism": 1,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": grace,
                        "containers": [
                            {
                                "name": "main",
                                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}},
                            }
                        ],
                    },
                },
            },
        },
        ns,
        "batch",
    )
