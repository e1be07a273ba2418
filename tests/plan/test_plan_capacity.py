"""`upgrader plan`: `insufficient-gpu-capacity`, the GPU pods a node evicts that would find no room.

On the healthy fleet gpu-a-01 (wave 1 under the default policy) evicts ml-training/llm-pretrain-0
(StatefulSet, 4 GPUs) and inference/triton-0 (ReplicaSet, 2 GPUs); the other nodes have 8 GPUs each,
free: gpu-a-02 1, gpu-b-01 6, gpu-b-02 1, gpu-c-01 2, gpu-c-02 5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.plan.test_plan import findings, plan
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import partition_mig

KIND = "insufficient-gpu-capacity"
BASE_FREE = {"gpu-a-02": 1, "gpu-b-01": 6, "gpu-b-02": 1, "gpu-c-01": 2, "gpu-c-02": 5}
MERGE = "application/merge-patch+json"
PRETRAIN_PENDING = (
    "1 evicted GPU pod(s) would stay Pending, no node they may run on having room: "
    "ml-training/llm-pretrain-0 (nvidia.com/gpu 4); "
)


def add_pod(cluster: EmulatedCluster, namespace: str, name: str, node: str, resources: dict[str, str],
            owner: tuple[str, str] | None = ("StatefulSet", "filler")) -> None:
    meta: dict[str, Any] = {"name": name, "labels": {"app": name}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                    "uid": f"uid-{owner[1]}", "controller": True}]
    spec = {"nodeName": node, "containers": [{"name": "main", "image": "busybox", "resources": {"limits": resources}}]}
    cluster.store.create(cluster.type("pods"), namespace, {"metadata": meta, "spec": spec,
                                                           "status": {"phase": "Running"}})


def leave_free(cluster: EmulatedCluster, free: dict[str, int]) -> None:
    """Fill nodes with a pod each so that `free[node]` GPUs stay free on them."""
    for node, left in free.items():
        add_pod(cluster, "ml-training", f"filler-{node}", node, {"nvidia.com/gpu": str(BASE_FREE[node] - left)})


def patch(cluster: EmulatedCluster, plural: str, namespace: str | None, name: str, body: dict[str, Any]) -> None:
    cluster.store.patch(cluster.type(plural), namespace, name, MERGE, body)


def a01(result: dict[str, Any]) -> list[str]:
    return [f["message"] for f in findings(result, KIND) if f["node"] == "gpu-a-01"]


def test_enough_room_is_no_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, result = plan(tmp_path, capsys)
    assert code == 0 and findings(result, KIND) == []


def test_not_enough_room_names_the_pod_and_the_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, result = plan(tmp_path, capsys, craft=lambda c: leave_free(c, {"gpu-b-01": 2, "gpu-c-02": 3}))
    assert a01(result) == [
        PRETRAIN_PENDING + "free on available nodes: nvidia.com/gpu 9 (gpu-a-02 1, gpu-b-01 2, gpu-b-02 1, "
        "gpu-c-01 2, gpu-c-02 3); counted unavailable: none"
    ]
    finding = next(f for f in findings(result, KIND) if f["node"] == "gpu-a-01")
    assert finding["severity"] == "warning"
    assert code == 0  # a warning: the plan's exit code stays 0


def test_room_only_on_a_tainted_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def taint(cluster: EmulatedCluster) -> None:
        leave_free(cluster, {"gpu-b-01": 2})
        patch(cluster, "nodes", None, "gpu-c-02",
              {"spec": {"taints": [{"key": "dedicated", "value": "serving", "effect": "NoSchedule"},
                                   {"key": "soft", "effect": "PreferNoSchedule"}]}})

    _, result = plan(tmp_path, capsys, craft=taint)
    assert a01(result) == [
        PRETRAIN_PENDING + "free on available nodes: nvidia.com/gpu 11 (gpu-a-02 1, gpu-b-01 2, gpu-b-02 1, "
        "gpu-c-01 2, gpu-c-02 5); counted unavailable: none"
    ]

    def tolerated(cluster: EmulatedCluster) -> None:
        taint(cluster)
        patch(cluster, "pods", "ml-training", "llm-pretrain-0",
              {"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "serving",
                                         "effect": "NoSchedule"}]}})

    _, result = plan(tmp_path, capsys, craft=tolerated)
    assert a01(result) == []


@pytest.mark.parametrize("spec", [
    {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1c"]}]},
    ]}}}},
], ids=["nodeSelector", "affinity"])
def test_room_only_on_a_node_the_pod_may_not_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: dict[str, Any]
) -> None:
    def pinned(cluster: EmulatedCluster) -> None:
        leave_free(cluster, {"gpu-b-01": 2})  # gpu-c-02 (H100, us-east-1c) keeps 5 free
        patch(cluster, "pods", "ml-training", "llm-pretrain-0", {"spec": spec})

    _, result = plan(tmp_path, capsys, craft=pinned)
    assert a01(result) == [
        PRETRAIN_PENDING + "free on available nodes: nvidia.com/gpu 11 (gpu-a-02 1, gpu-b-01 2, gpu-b-02 1, "
        "gpu-c-01 2, gpu-c-02 5); counted unavailable: none"
    ]


def test_bare_and_job_pods_are_named_not_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def gone(cluster: EmulatedCluster) -> None:
        leave_free(cluster, {"gpu-b-01": 2, "gpu-c-02": 3})
        add_pod(cluster, "default", "scratch", "gpu-a-01", {"nvidia.com/gpu": "1"}, owner=None)
        add_pod(cluster, "batch", "eval-x7k2p", "gpu-a-01", {"nvidia.com/gpu": "1"}, ("Job", "eval"))

    _, result = plan(tmp_path, capsys, craft=gone, policy={"gpuPodDeletion": {"force": True}})
    assert a01(result) == [
        PRETRAIN_PENDING + "free on available nodes: nvidia.com/gpu 9 (gpu-a-02 1, gpu-b-01 2, gpu-b-02 1, "
        "gpu-c-01 2, gpu-c-02 3); counted unavailable: none; not counted, nothing recreates them elsewhere: "
        "batch/eval-x7k2p (Job), default/scratch (no controller)"
    ]


def test_bare_and_job_pods_alone_need_no_room(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def only_gone(cluster: EmulatedCluster) -> None:
        leave_free(cluster, {node: 0 for node in BASE_FREE})
        for namespace, name in (("ml-training", "llm-pretrain-0"), ("inference", "triton-0")):
            cluster.store.delete(cluster.type("pods"), namespace, name, grace_seconds=0)
        add_pod(cluster, "default", "scratch", "gpu-a-01", {"nvidia.com/gpu": "1"}, owner=None)
        add_pod(cluster, "batch", "eval-x7k2p", "gpu-a-01", {"nvidia.com/gpu": "1"}, ("Job", "eval"))

    _, result = plan(tmp_path, capsys, craft=only_gone, policy={"gpuPodDeletion": {"force": True}})
    assert a01(result) == []


def test_a_cordoned_nodes_free_gpus_do_not_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def cordoned(cluster: EmulatedCluster) -> None:
        leave_free(cluster, {"gpu-b-01": 2})
        patch(cluster, "nodes", None, "gpu-c-02", {"spec": {"unschedulable": True}})

    _, result = plan(tmp_path, capsys, craft=cordoned)
    assert a01(result) == [
        PRETRAIN_PENDING + "free on available nodes: nvidia.com/gpu 6 (gpu-a-02 1, gpu-b-01 2, gpu-b-02 1, "
        "gpu-c-01 2); counted unavailable: gpu-c-02 (cordoned)"
    ]


def test_nodes_of_the_same_wave_count_as_unavailable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def crowded(cluster: EmulatedCluster) -> None:
        leave_free(cluster, {"gpu-b-01": 2, "gpu-c-02": 3})

    _, result = plan(tmp_path, capsys, craft=crowded, policy={"maxParallelUpgrades": 2, "maxUnavailable": 2})
    assert result["waves"][0]["nodes"] == ["gpu-a-01", "gpu-a-02"]
    assert a01(result) == [
        PRETRAIN_PENDING + "free on available nodes: nvidia.com/gpu 8 (gpu-b-01 2, gpu-b-02 1, gpu-c-01 2, "
        "gpu-c-02 3); counted unavailable: gpu-a-02 (upgraded with it in wave 1)"
    ]


def test_mig_slices_are_counted_apart_from_whole_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def mig(cluster: EmulatedCluster, used: int) -> None:
        partition_mig(cluster, "gpu-c-02")  # 7 GPUs and 7 nvidia.com/mig-1g.10gb: 4 GPUs stay free
        add_pod(cluster, "ml-training", "notebook-0", "gpu-a-01", {"nvidia.com/mig-1g.10gb": "2"},
                owner=("ReplicaSet", "notebook-5f7d9"))
        if used:
            add_pod(cluster, "ml-training", "mig-filler", "gpu-c-02", {"nvidia.com/mig-1g.10gb": str(used)})

    _, result = plan(tmp_path, capsys, craft=lambda c: mig(c, 0))
    assert a01(result) == []
    _, result = plan(tmp_path, capsys, craft=lambda c: mig(c, 6))
    assert a01(result) == [
        "1 evicted GPU pod(s) would stay Pending, no node they may run on having room: "
        "ml-training/notebook-0 (nvidia.com/mig-1g.10gb 2); free on available nodes: nvidia.com/gpu 14 "
        "(gpu-a-02 1, gpu-b-01 6, gpu-b-02 1, gpu-c-01 2, gpu-c-02 4), nvidia.com/mig-1g.10gb 1 (gpu-c-02 1); "
        "counted unavailable: none"
    ]
