"""`upgrader plan` judges a node's pods as the controller does: GPU pods as the GPU Operator counts
them (MIG slices, NVIDIA DRA claims), a drain only where one would happen, restart-only upgrades, and
the Operator's maxUnavailable 0. From a kubectl List file, as a user exports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import (
    add_dra_pod,
    operator_render,
    partition_mig,
    pinned_workload_pod,
)

from .test_plan import KINDS, findings, node, plan

MIG = "nvidia.com/mig-1g.10gb"


def _mig_and_dra(cluster: EmulatedCluster) -> None:
    partition_mig(cluster, "gpu-a-01")
    cluster.create("pods", pinned_workload_pod("mig-infer", "gpu-a-01", {MIG: "1"}), "ml-training")
    add_dra_pod(cluster, "gpu-a-01")


def test_mig_and_dra_pods_are_gpu_pods(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    monkeypatch.setattr("tests.plan.test_plan.KINDS", [*KINDS, ("resourceclaims", "resource.k8s.io", "v1")])
    _, result = plan(tmp_path, capsys, craft=_mig_and_dra)
    listed = node(result, "gpu-a-01")["gpu_pods"]
    assert "ml-training/mig-infer" in listed and "ml-training/dra-train" in listed


def test_a_claim_missing_from_the_file_counts_as_a_gpu_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, result = plan(tmp_path, capsys, craft=_mig_and_dra)  # no ResourceClaims exported
    assert "ml-training/dra-train" in node(result, "gpu-a-01")["gpu_pods"]


def test_drain_enabled_drains_nothing_when_gpu_pod_deletion_can_finish(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result = plan(tmp_path, capsys, policy={"drain": {"enable": True, "deleteEmptyDir": True}})
    assert code == 0
    assert all(n["drain_pods"] == [] for n in result["nodes"])
    every = {"drain": {"enable": True, "deleteEmptyDir": True}, "drainEveryNode": True}
    _, result = plan(tmp_path, capsys, policy=every)
    assert "web/api-gateway-0" in node(result, "gpu-a-01")["drain_pods"]


def test_a_gpu_pod_deletion_may_not_take_falls_back_to_the_drain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def bare(cluster: EmulatedCluster) -> None:
        pod = pinned_workload_pod("scratch", "gpu-b-01", {"nvidia.com/gpu": "1"}, "batch")
        pod["metadata"].pop("ownerReferences")
        cluster.create("pods", pod, "batch")

    policy = {"drain": {"enable": True, "force": True, "podSelector": "app=scratch"}}
    code, result = plan(tmp_path, capsys, craft=bare, policy=policy)
    assert code == 0
    (warning,) = findings(result, "pod-deletion-blocked")
    assert (warning["node"], warning["severity"]) == ("gpu-b-01", "warning")
    assert warning["message"] == (
        "batch/scratch is not managed by a controller: set gpuPodDeletion.force to delete it; "
        "the node falls back to a drain"
    )
    code, result = plan(tmp_path, capsys, craft=bare, policy={"drain": {"enable": True, "podSelector": "app=scratch"}})
    assert code == 1
    (blocking,) = findings(result, "pod-deletion-blocked")
    assert blocking["severity"] == "blocking" and blocking["message"].endswith(
        "nor will the drain: batch/scratch is not managed by a controller: set drain.force to delete it"
    )


def test_a_template_change_that_installs_nothing_is_a_restart_only_upgrade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def relabel_template(cluster: EmulatedCluster) -> None:
        ds_type = cluster.type("daemonsets", "apps")
        for ds in cluster.store.objects(ds_type, "gpu-operator"):
            if ds["metadata"]["labels"].get("app") != "nvidia-driver-daemonset":
                continue
            for pod in cluster.store.objects(cluster.type("pods"), "gpu-operator"):  # every node already current
                if pod["metadata"]["ownerReferences"][0]["name"] == ds["metadata"]["name"]:
                    cluster.store.remove(cluster.type("pods"), pod)
            cluster.advance(10)
            labels = {**ds["spec"]["template"]["metadata"]["labels"], "team": "gpu"}
            template = {**ds["spec"]["template"], "metadata": {"labels": labels}}
            cluster.store.patch(ds_type, "gpu-operator", ds["metadata"]["name"], "application/merge-patch+json",
                                {"spec": {"template": operator_render(template)}})

    _, result = plan(tmp_path, capsys, craft=relabel_template)
    a01 = node(result, "gpu-a-01")
    assert a01["restart_only"] is True and a01["wave"] == 1
    assert "inference/triton-0" in a01["gpu_pods"]  # they stay
    assert findings(result, "pdb-blocks-eviction") == []


def test_max_unavailable_zero_warns_that_available_nodes_never_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def cordon(cluster: EmulatedCluster) -> None:
        cluster.store.patch(cluster.type("nodes"), None, "gpu-b-01", "application/merge-patch+json",
                            {"spec": {"unschedulable": True}})

    policy = {"maxUnavailable": 0, "failureDomains": {"canary": "us-east-1b"}}
    code, result = plan(tmp_path, capsys, craft=cordon, policy=policy)
    assert code == 0
    (warning,) = findings(result, "max-unavailable-zero")
    assert warning["message"] == (
        "maxUnavailable 0: only nodes already unavailable (cordoned or NotReady) start; 5 node(s) that need "
        "the new driver never will: gpu-a-01, gpu-a-02, gpu-b-02, gpu-c-01, gpu-c-02"
    )
    assert node(result, "gpu-b-01")["wave"] == 1
