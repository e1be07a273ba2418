"""The GPU Operator's safe driver loading, end to end on the emulator (docs/migrating-from-gpu-operator.md):
a driver pod whose init container waits for a safe load (`nvidia.com/gpu-driver-upgrade.driver-wait-for-safe-load`)
keeps the old module loaded; upgrader takes the node through the upgrade and removes the annotation at
the restart step, once the node's GPU pods are gone, as k8s-operator-libs' UnblockLoading does."""

from __future__ import annotations

import copy

from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.driver import SAFE_LOAD_ANNOTATION, SAFE_LOAD_ENV
from upgrader.sim.fleets.builders import OPERATOR_NS, operator_render
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder

MANAGER = {"name": "k8s-driver-manager", "image": "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.7.0",
           "env": [{"name": SAFE_LOAD_ENV, "value": "true"}]}
POLICY = {"maxParallelUpgrades": 1, "maxUnavailable": 1, "podDeletion": {"force": True, "timeoutSeconds": 60}}


def safe_loading_fleet() -> tuple[EmulatedCluster, Controller, RolloutRecorder, list[str]]:
    """The healthy fleet with safe loading turned on in every driver DaemonSet's newest template."""
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    daemonsets = cluster.type("daemonsets", "apps")
    for name in info.driver_daemonsets:
        ds = cluster.store.find(daemonsets, OPERATOR_NS, name)
        assert ds is not None
        template = copy.deepcopy(ds["spec"]["template"])
        template["spec"]["initContainers"] = [MANAGER]
        cluster.store.patch(daemonsets, OPERATOR_NS, name, "application/merge-patch+json",
                            {"spec": {"template": operator_render(template)}})
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy_from_mapping(POLICY), Settings(identity="safe-load"), cluster.store.clock.now)
    return cluster, controller, RolloutRecorder(cluster), info.nodes


def labels(cluster: EmulatedCluster, node: str) -> dict[str, str]:
    return dict(((cluster.get("nodes", node) or {}).get("metadata") or {}).get("labels") or {})


def annotations(cluster: EmulatedCluster, node: str) -> dict[str, str]:
    return dict(((cluster.get("nodes", node) or {}).get("metadata") or {}).get("annotations") or {})


def run(cluster: EmulatedCluster, controller: Controller, seconds: int) -> None:
    for _ in range(seconds):
        controller.reconcile()
        cluster.advance(1)


def test_a_rollout_with_safe_loading_unblocks_each_driver_only_after_its_gpu_pods_are_gone() -> None:
    cluster, controller, recorder, nodes = safe_loading_fleet()
    run(cluster, controller, 900)
    assert {n: labels(cluster, n).get(STATE_LABEL) for n in nodes} == dict.fromkeys(nodes, State.DONE.value)
    assert cluster.daemonsets.incidents == [], "no driver loaded under running GPU pods"
    assert all(SAFE_LOAD_ANNOTATION not in annotations(cluster, n) for n in nodes)
    pointer = "/metadata/annotations/" + SAFE_LOAD_ANNOTATION.replace("/", "~1")  # a JSON patch's path
    removals = [r for r in cluster.requests if r.verb == "patch" and r.resource == "nodes"
                and {"op": "remove", "path": pointer} in (r.body if isinstance(r.body, list) else [])]
    assert {r.name for r in removals} == set(nodes), "upgrader unblocked each load itself"
    assert recorder.check(controller.policy, {n: "" for n in nodes}, None) == []


def test_a_driver_pod_restarted_by_someone_else_waits_until_upgrader_takes_its_node_through() -> None:
    """A driver pod deleted outside any upgrade (a kubelet restart, an admin): the new one waits for a
    safe load with the node's GPU pods still running on the old module; upgrader sees the annotation
    and upgrades the node, and the driver loads only once they are gone."""
    cluster, controller, _, nodes = safe_loading_fleet()
    node = nodes[0]
    pods = cluster.type("pods")
    (driver,) = [p for p in cluster.store.objects(pods, OPERATOR_NS) if p["spec"].get("nodeName") == node
                 and p["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"]
    cluster.store.delete(pods, OPERATOR_NS, driver["metadata"]["name"])
    cluster.advance(60)
    assert annotations(cluster, node).get(SAFE_LOAD_ANNOTATION) == "true"
    assert cluster.daemonsets.incidents == [], "the old module stays loaded under the GPU pods"
    gpu = (cluster.get("nodes", node) or {})["status"]["allocatable"]["nvidia.com/gpu"]
    assert gpu != "0", "its GPUs are still there"
    run(cluster, controller, 900)
    assert labels(cluster, node).get(STATE_LABEL) == State.DONE.value
    assert cluster.daemonsets.incidents == []
    assert SAFE_LOAD_ANNOTATION not in annotations(cluster, node)
