"""The GPU resources the GPU Operator's upgrade code looks for, as the emulator serves them: MIG slices
on nodes, `resource.k8s.io/v1` ResourceClaims allocated by NVIDIA's DRA driver (get, list, watch),
DRIVER_CONFIG_DIGEST on driver templates, and the kubelet pulling a missing image again.
Seen through the official client, on a virtual clock."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import (
    DRIVER_REPO,
    add_dra_pod,
    driver_tag,
    operator_render,
    partition_mig,
    pinned_workload_pod,
    resource_claim,
)
from upgrader.sim.fleets.scenarios import UNBUILT_KERNEL, ScenarioInfo

OPERATOR = "gpu-operator"
MIG = "nvidia.com/mig-1g.10gb"


@pytest.fixture
def resource(api_client: k8s.ApiClient) -> k8s.ResourceV1Api:
    return k8s.ResourceV1Api(api_client)


def test_resource_claims_are_served_with_their_allocation(
    cluster: EmulatedCluster, fleet: Callable[[str], ScenarioInfo], resource: k8s.ResourceV1Api
) -> None:
    fleet("healthy")
    pod = add_dra_pod(cluster, "gpu-a-01")
    claims = resource.list_resource_claim_for_all_namespaces().items
    assert [(c.metadata.namespace, c.metadata.name) for c in claims] == [("ml-training", "dra-train-gpu")]
    (result,) = claims[0].status.allocation.devices.results
    assert (result.driver, result.pool) == ("gpu.nvidia.com", "gpu-a-01")
    one = resource.read_namespaced_resource_claim("dra-train-gpu", "ml-training")
    assert one.metadata.uid == claims[0].metadata.uid
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "dra-train-gpu"}]


def test_resource_claims_can_be_watched(cluster: EmulatedCluster, resource: k8s.ResourceV1Api) -> None:
    cluster.create("namespaces", {"metadata": {"name": "ml"}})
    since = resource.list_namespaced_resource_claim("ml").metadata.resource_version
    cluster.create("resourceclaims", resource_claim("c1", "gpu-a-01"), "ml", "resource.k8s.io")
    # The client's own model name (ResourceV1ResourceClaim) is given: its watch guesses V1ResourceClaim.
    stream = watch.Watch(return_type="ResourceV1ResourceClaim").stream(
        resource.list_namespaced_resource_claim, "ml", resource_version=since, timeout_seconds=1
    )
    events = [(e["type"], e["object"]) for e in stream]
    assert [(t, o.metadata.name, o.status.allocation.devices.results[0].driver) for t, o in events] == [
        ("ADDED", "c1", "gpu.nvidia.com")
    ]


def test_a_mig_node_schedules_mig_pods_by_their_slices(
    cluster: EmulatedCluster, fleet: Callable[[str], ScenarioInfo], core: k8s.CoreV1Api
) -> None:
    fleet("healthy")
    partition_mig(cluster, "gpu-a-01", slices=7)
    node = core.read_node("gpu-a-01")
    assert node.status.allocatable[MIG] == "7" and node.status.allocatable["nvidia.com/gpu"] == "7"
    assert node.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    pods = cluster.workloads  # the scheduler
    for i in range(3):
        body = pinned_workload_pod(f"mig-{i}", "gpu-a-01", {MIG: "3"})
        body["spec"].pop("nodeName")
        body["spec"].pop("nodeSelector")
        cluster.create("pods", body, "ml-training")
    pods.schedule_pending()
    placed = {
        p.metadata.name: p.spec.node_name
        for p in core.list_namespaced_pod("ml-training").items
        if p.metadata.name.startswith("mig-")
    }
    assert placed == {"mig-0": "gpu-a-01", "mig-1": "gpu-a-01", "mig-2": None}  # 7 slices hold two of three


def test_stopping_the_driver_under_a_mig_or_dra_pod_is_an_incident(
    cluster: EmulatedCluster, fleet: Callable[[str], ScenarioInfo], core: k8s.CoreV1Api
) -> None:
    fleet("healthy")
    partition_mig(cluster, "gpu-c-01")
    cluster.create("pods", pinned_workload_pod("mig-job", "gpu-c-01", {MIG: "1"}), "ml-training")
    add_dra_pod(cluster, "gpu-c-02")
    for node in ("gpu-c-01", "gpu-c-02"):
        (driver,) = core.list_namespaced_pod(
            OPERATOR, label_selector="app=nvidia-driver-daemonset", field_selector=f"spec.nodeName={node}"
        ).items
        core.delete_namespaced_pod(driver.metadata.name, OPERATOR)
    cluster.advance(1)
    incidents = cluster.daemonsets.incidents
    assert any("gpu-c-01" in i and "mig-job" in i for i in incidents), incidents
    assert any("gpu-c-02" in i and "dra-train" in i for i in incidents), incidents
    assert core.read_node("gpu-c-01").status.allocatable[MIG] == "0"


def test_driver_templates_carry_a_digest_of_what_installs_the_driver(
    cluster: EmulatedCluster, fleet: Callable[[str], ScenarioInfo], apps: k8s.AppsV1Api
) -> None:
    fleet("healthy")
    (ds, _) = apps.list_namespaced_daemon_set(OPERATOR, label_selector="app=nvidia-driver-daemonset").items
    env = {e.name: e.value for e in ds.spec.template.spec.containers[0].env}
    digest = env["DRIVER_CONFIG_DIGEST"]
    assert digest.isdigit() and env["DRIVER_VERSION"] == "550.90.07"
    relabelled = {"metadata": {"labels": {"team": "gpu"}}, "spec": _api_spec(cluster, ds.metadata.name)}
    assert _digest(operator_render(relabelled)) == digest  # a label does not install anything
    other = _api_spec(cluster, ds.metadata.name)
    other["containers"][0]["image"] = "nvcr.io/nvidia/driver:570-5.15.0-105-generic-ubuntu22.04"
    assert _digest(operator_render({"spec": other})) != digest


def _api_spec(cluster: EmulatedCluster, name: str) -> dict:
    ds = cluster.get("daemonsets", name, OPERATOR, "apps")
    assert ds is not None
    return copy.deepcopy(ds["spec"]["template"]["spec"])


def _digest(template: dict) -> str:
    env = template["spec"]["containers"][0]["env"]
    return next(e["value"] for e in env if e["name"] == "DRIVER_CONFIG_DIGEST")


def test_a_published_image_is_pulled_on_the_kubelets_next_try(
    cluster: EmulatedCluster, fleet: Callable[[str], ScenarioInfo], core: k8s.CoreV1Api
) -> None:
    fleet("missing-image")
    (broken,) = [n.metadata.name for n in core.list_node().items if n.status.node_info.kernel_version == UNBUILT_KERNEL]

    def driver() -> k8s.V1Pod:
        (pod,) = core.list_namespaced_pod(
            OPERATOR, label_selector="app=nvidia-driver-daemonset", field_selector=f"spec.nodeName={broken}"
        ).items
        return pod

    core.delete_namespaced_pod(driver().metadata.name, OPERATOR)
    cluster.advance(5)
    assert driver().status.container_statuses[0].state.waiting.reason == "ImagePullBackOff"
    cluster.advance(60)
    assert driver().status.container_statuses[0].state.waiting.reason == "ImagePullBackOff"  # retried, still missing
    cluster.settings.registry[DRIVER_REPO].add(driver_tag("550.90.07", UNBUILT_KERNEL))
    cluster.advance(90)  # the back-off (at most 80 s by now), then the pull and the start
    pod = driver()
    assert pod.status.phase == "Running" and pod.status.container_statuses[0].ready
