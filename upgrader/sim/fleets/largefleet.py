"""Generated fleets at scale (thousands of nodes, ~30 pods each) for benchmarks and campaigns.

The objects look like the scenarios' (same node labels, driver DaemonSets per kernel, validators,
workloads behind PDBs) so plan and controller do their real work on them. Deterministic per seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from upgrader.sim.controllers.daemonsets import revision_hash
from upgrader.sim.fleets.builders import (
    KERNELS,
    NEW_DRIVER,
    OLD_DRIVER,
    OPERATOR_NS,
    PRODUCTS,
    ZONES,
    driver_daemonset,
    driver_template,
    node_object,
    pod_object,
)

Obj = dict[str, Any]
APPS_PER_NAMESPACE = 50
UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"  # the GPU Operator's node label


def _with_meta(obj: Obj, kind: str, api_version: str, namespace: str | None, uid: str) -> Obj:
    obj["kind"], obj["apiVersion"] = kind, api_version
    meta = obj["metadata"]
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update({"uid": uid, "resourceVersion": "1", "creationTimestamp": "2026-11-01T00:00:00Z"})
    return obj


def driver_objects(zones: tuple[str, ...] = ZONES) -> Iterator[Obj]:
    """Driver DaemonSets (one per kernel) already moved to the new driver, with both revisions."""
    for kernel in KERNELS:
        ds = _with_meta(
            driver_daemonset(kernel, NEW_DRIVER), "DaemonSet", "apps/v1", OPERATOR_NS, f"uid-ds-{kernel}"
        )
        yield ds
        for number, version in ((1, OLD_DRIVER), (2, NEW_DRIVER)):
            template = driver_template(kernel, version)
            digest = revision_hash(template)
            yield _with_meta(
                {
                    "metadata": {
                        "name": f"{ds['metadata']['name']}-{digest}",
                        "labels": {"controller-revision-hash": digest},
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "DaemonSet",
                                "name": ds["metadata"]["name"],
                                "uid": ds["metadata"]["uid"],
                                "controller": True,
                            }
                        ],
                    },
                    "data": {"spec": {"template": template}},
                    "revision": number,
                },
                "ControllerRevision",
                "apps/v1",
                OPERATOR_NS,
                f"uid-cr-{kernel}-{number}",
            )


def fleet_objects(nodes: int, pods_per_node: int = 30, seed: int = 0) -> Iterator[Obj]:
    """Nodes, their pods (driver, validator and workloads) and the PDBs over the workloads."""
    rng = random.Random(seed)
    hashes = {kernel: revision_hash(driver_template(kernel, OLD_DRIVER)) for kernel in KERNELS}
    yield from driver_objects()
    workload_pods = max(0, pods_per_node - 2)
    namespaces = max(1, nodes * workload_pods // (APPS_PER_NAMESPACE * 60))
    for ns in range(namespaces):
        for index in range(APPS_PER_NAMESPACE):
            yield _with_meta(
                {
                    "metadata": {"name": f"app-{index}"},
                    "spec": {"selector": {"matchLabels": {"app": f"app-{index}"}}, "maxUnavailable": 1},
                    "status": {
                        "disruptionsAllowed": 1,
                        "currentHealthy": 60,
                        "desiredHealthy": 59,
                        "expectedPods": 60,
                    },
                },
                "PodDisruptionBudget",
                "policy/v1",
                f"team-{ns}",
                f"uid-pdb-{ns}-{index}",
            )
    for i in range(nodes):
        zone = ZONES[i * len(ZONES) // nodes]
        kernel = KERNELS[i % len(KERNELS)]
        name = f"gpu-{i:05d}"
        yield _with_meta(
            node_object(name, zone, kernel, PRODUCTS[(i // 2) % len(PRODUCTS)], i),
            "Node",
            "v1",
            None,
            f"uid-node-{i}",
        )
        ds_name = f"nvidia-driver-daemonset-{kernel}-ubuntu22.04"
        driver = pod_object(
            f"{ds_name}-{i:05d}",
            name,
            {"app": "nvidia-driver-daemonset", "controller-revision-hash": hashes[kernel]},
            f"nvcr.io/nvidia/driver:535-{kernel}-ubuntu22.04",
            owner=("apps/v1", "DaemonSet", ds_name),
        )
        driver["metadata"]["ownerReferences"][0]["uid"] = f"uid-ds-{kernel}"
        yield _with_meta(driver, "Pod", "v1", OPERATOR_NS, f"uid-pod-d-{i}")
        yield _with_meta(
            pod_object(
                f"nvidia-operator-validator-{i:05d}",
                name,
                {"app": "nvidia-operator-validator"},
                "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v24.6.0",
                owner=("apps/v1", "DaemonSet", "nvidia-operator-validator"),
            ),
            "Pod",
            "v1",
            OPERATOR_NS,
            f"uid-pod-v-{i}",
        )
        for j in range(workload_pods):
            team = f"team-{rng.randrange(namespaces)}"
            app = f"app-{rng.randrange(APPS_PER_NAMESPACE)}"
            gpus = 1 if j < 4 else 0
            pod = pod_object(
                f"{app}-{i:05d}-{j:02d}",
                name,
                {"app": app, "tier": "gpu" if gpus else "cpu"},
                "nvcr.io/nvidia/pytorch:24.05-py3" if gpus else "nginx:1.27",
                gpus,
                ("apps/v1", "ReplicaSet", f"{app}-5c6b7"),
                annotations={"gpu-upgrader.io/cuda-runtime": "12.4"} if gpus else None,
            )
            yield _with_meta(pod, "Pod", "v1", team, f"uid-pod-{i}-{j}")


def kubectl_list(nodes: int, pods_per_node: int = 30, seed: int = 0) -> Obj:
    """The fleet as `kubectl get ... -A -o json` prints it."""
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": list(fleet_objects(nodes, pods_per_node, seed)),
    }


def paused_rollout(
    nodes: int, pods_per_node: int = 30, seed: int = 0, state: str = "upgrade-required"
) -> Iterator[Obj]:
    """The fleet with its rollout under way and paused: every node labelled `state` (as upgrader's
    first pass labels them) and upgrader's status ConfigMap saying `paused`, so a pass starts
    nothing: benchmarks measure what a pass costs with nothing, or a chosen few nodes, in progress."""
    for obj in fleet_objects(nodes, pods_per_node, seed):
        if obj["kind"] == "Node":
            obj["metadata"]["labels"][UPGRADE_STATE_LABEL] = state
        yield obj
    yield _with_meta(
        {"metadata": {"name": "gpu-driver-upgrade-status"}, "data": {"paused": "true"}},
        "ConfigMap",
        "v1",
        OPERATOR_NS,
        "uid-upgrader-status",
    )
