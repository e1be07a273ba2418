"""Realistic GPU fleets to upgrade: every node runs an older driver than its DaemonSet's newest revision.

Each scenario spreads nodes over three zones (`topology.kubernetes.io/zone`), labels them as GPU
Feature Discovery and Node Feature Discovery would, runs the GPU Operator's driver DaemonSets (one
per kernel, precompiled images `<branch>-<kernel>-<os>`) and validators, and places training
pods holding GPUs behind PDBs, inference pods, batch jobs and non-GPU pods. Then the driver
DaemonSets move to the new driver, so every node needs an upgrade.
"""

from __future__ import annotations

from collections.abc import Callable
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
    ZONES,
    driver_tag,
    install_operator,
    node_object,
    pod_object,
)
from upgrader.sim.fleets.catalog import DEFAULT_NODES

Obj = dict[str, Any]

UNBUILT_KERNEL = "5.15.0-119-generic"  # the missing-image scenario's odd node
BATCH_SELECTOR = "app=batch-eval"
LEDGER_CONFIGMAP = "driver-image-ledger"  # in OPERATOR_NS: the images the emulated registry holds


@dataclass
class ScenarioInfo:
    """What a scenario built, for tests and the demo to refer to."""

    name: str
    nodes: list[str]
    domains: dict[str, list[str]]
    driver_daemonsets: list[str]
    target_driver: str = NEW_DRIVER
    blocked_node: str | None = None
    blocking_pdb: str | None = None
    stuck_job_node: str | None = None
    missing_image_node: str | None = None
    broken_validation_node: str | None = None
    notes: list[str] = field(default_factory=list)


class _Builder:
    def __init__(self, cluster: EmulatedCluster, name: str, count: int, job_seconds: float = 10.0) -> None:
        if count < len(ZONES):
            raise ValueError(f"--nodes must be at least {len(ZONES)} (one per zone), got {count}")
        self.c = cluster
        self.info = ScenarioInfo(name, [], {z: [] for z in ZONES}, [])
        self.count = count
        self.job_seconds = job_seconds
        self.kernels: dict[str, str] = {}

    def fleet(self, odd_kernel_node: int | None = None) -> None:
        for ns in (OPERATOR_NS, "ml-training", "inference", "batch", "monitoring", "web"):
            self.c.create("namespaces", {"metadata": {"name": ns}})
        for i in range(self.count):
            zone = ZONES[i * len(ZONES) // self.count]
            name = f"gpu-{zone[-1]}-{len(self.info.domains[zone]) + 1:02d}"
            kernel = UNBUILT_KERNEL if i == odd_kernel_node else KERNELS[i % len(KERNELS)]
            self.c.create("nodes", node_object(name, zone, kernel, PRODUCTS[(i // 2) % len(PRODUCTS)], i))
            self.info.nodes.append(name)
            self.info.domains[zone].append(name)
            self.kernels[name] = kernel
        self.c.settings.registry[DRIVER_REPO] = {
            driver_tag(v, k) for v in (OLD_DRIVER, NEW_DRIVER) for k in (*KERNELS, UNBUILT_KERNEL)
        }

    def ledger(self) -> None:
        """The image ledger a team keeps (`crane ls` of its registry), as a ConfigMap a policy's
        `preflight.imageLedger` can name: what the emulated registry holds once the scenario is built."""
        tags = "".join(f"{DRIVER_REPO}:{tag}\n" for tag in sorted(self.c.settings.registry.get(DRIVER_REPO, ())))
        self.c.create("configmaps", {"metadata": {"name": LEDGER_CONFIGMAP}, "data": {"images.txt": tags}}, OPERATOR_NS)

    def operator(self) -> None:
        self.info.driver_daemonsets.extend(install_operator(self.c, self.kernels))

    def workloads(self) -> None:
        """Training behind a maxUnavailable-1 PDB, inference behind a 50% one, jobs, non-GPU pods."""
        pytorch = "nvcr.io/nvidia/pytorch:24.05-py3"
        cuda = {"gpu-upgrader.io/cuda-runtime": "12.4"}
        self._pdb("ml-training", "llm-pretrain", {"app": "llm-pretrain"}, max_unavailable=1)
        self._pdb("inference", "triton", {"app": "triton"}, min_available="50%")
        self._pdb("web", "api-gateway", {"app": "api-gateway"}, max_unavailable=1)
        for i, node in enumerate(self.info.nodes):
            if i % 3 != 2:
                self._add(
                    pod_object(
                        f"llm-pretrain-{i}",
                        node,
                        {"app": "llm-pretrain"},
                        pytorch,
                        GPUS_PER_NODE // 2,
                        ("apps/v1", "StatefulSet", "llm-pretrain"),
                        annotations=cuda,
                    ),
                    "ml-training",
                )
            self._add(
                pod_object(
                    f"triton-{i}",
                    node,
                    {"app": "triton"},
                    "nvcr.io/nvidia/tritonserver:24.05-py3",
                    2,
                    ("apps/v1", "ReplicaSet", "triton-7d9f8"),
                    annotations=cuda,
                ),
                "inference",
            )
            self._add(
                pod_object(
                    f"api-gateway-{i}",
                    node,
                    {"app": "api-gateway"},
                    "nginx:1.27",
                    owner=("apps/v1", "ReplicaSet", "api-gateway-5c6b7"),
                    empty_dir=True,
                ),
                "web",
            )
        exporter = self.c.create(
            "daemonsets",
            {
                "metadata": {"name": "node-exporter"},
                "spec": {
                    "selector": {"matchLabels": {"app": "node-exporter"}},
                    "template": {
                        "metadata": {"labels": {"app": "node-exporter"}},
                        "spec": {
                            "terminationGracePeriodSeconds": 1,
                            "containers": [
                                {"name": "exporter", "image": "quay.io/prometheus/node-exporter:v1.8.1"}
                            ],
                        },
                    },
                },
            },
            "monitoring",
            "apps",
        )
        for node in self.info.nodes:
            self.c.daemonsets.create_pod(exporter, node, ready_now=True)
        for zone, nodes in self.info.domains.items():
            self.job(f"nightly-eval-{zone[-1]}", nodes[-1], f"{self.job_seconds:g}")

    def job(self, name: str, node: str, seconds: str) -> None:
        self.c.create(
            "jobs",
            {
                "metadata": {"name": name, "annotations": {JOB_RUN_SECONDS: seconds}},
                "spec": {
                    "completions": 1,
                    "parallelism": 1,
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": {"app": "batch-eval"}},
                        "spec": {
                            "nodeName": node,
                            "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 1,
                            "containers": [
                                {
                                    "name": "eval",
                                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                    "resources": {"limits": {GPU: "1"}},
                                }
                            ],
                        },
                    },
                },
            },
            "batch",
            "batch",
        )

    def _pdb(
        self,
        ns: str,
        name: str,
        match: dict[str, str],
        min_available: Any = None,
        max_unavailable: Any = None,
    ) -> None:
        spec: Obj = {"selector": {"matchLabels": match}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        self.c.create("poddisruptionbudgets", {"metadata": {"name": name}, "spec": spec}, ns, "policy")

    def _add(self, pod: Obj, ns: str) -> None:
        self.c.create("pods", pod, ns)


def _healthy(b: _Builder) -> None:
    b.fleet()
    b.operator()
    b.workloads()


def _pdb_blocked(b: _Builder) -> None:
    _healthy(b)
    node = b.info.domains[ZONES[0]][0]
    b._pdb("ml-training", "critical-finetune", {"app": "critical-finetune"}, min_available=1)
    b._add(
        pod_object(
            "critical-finetune-0",
            node,
            {"app": "critical-finetune"},
            "nvcr.io/nvidia/nemo:24.05",
            GPUS_PER_NODE // 2,
            ("apps/v1", "StatefulSet", "critical-finetune"),
        ),
        "ml-training",
    )
    b.info.blocked_node, b.info.blocking_pdb = node, "ml-training/critical-finetune"


def _stuck_job(b: _Builder) -> None:
    _healthy(b)
    node = b.info.domains[ZONES[0]][0]
    b.job("stuck-eval", node, "never")
    b.info.stuck_job_node = node


def _missing_image(b: _Builder) -> None:
    b.fleet(odd_kernel_node=1)
    b.operator()
    b.workloads()
    node = b.info.nodes[1]
    b.c.settings.registry[DRIVER_REPO].discard(driver_tag(NEW_DRIVER, UNBUILT_KERNEL))
    b.info.missing_image_node = node
    b.info.notes.append(f"no image {DRIVER_REPO}:{driver_tag(NEW_DRIVER, UNBUILT_KERNEL)} for {node}")


def _validation_failure(b: _Builder) -> None:
    _healthy(b)
    node = b.info.domains[ZONES[0]][-1]
    b.c.settings.broken_validation_nodes.add(node)
    b.info.broken_validation_node = node


SCENARIOS: dict[str, Callable[[_Builder], None]] = {
    "healthy": _healthy,
    "pdb-blocked": _pdb_blocked,
    "stuck-job": _stuck_job,
    "missing-image": _missing_image,
    "validation-failure": _validation_failure,
}


def build(cluster: EmulatedCluster, name: str = "healthy", nodes: int = DEFAULT_NODES,
          job_seconds: float = 10.0) -> ScenarioInfo:
    """Populate `cluster` with a scenario; raises ValueError for an unknown name or too few nodes."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    builder = _Builder(cluster, name, nodes, job_seconds)
    SCENARIOS[name](builder)
    builder.ledger()
    cluster.store.run_due()
    return builder.info
