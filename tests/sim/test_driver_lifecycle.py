"""The GPU driver's life on a node, in the scenario fleets, seen through the official client.

Every node starts on the old driver (revision 1) while each driver DaemonSet's newest
ControllerRevision is revision 2 (OnDelete). Deleting a driver pod is how a node gets upgraded:
the GPUs go away, the validator goes not-Ready, a new pod comes from the newest revision, and
once it is Ready the GPUs, the driver-version label and the validator come back.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client as k8s

from tests.sim.builders import is_ready
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import ScenarioInfo

OPERATOR = "gpu-operator"
HASH = "controller-revision-hash"
GPU = "nvidia.com/gpu"
DRIVER_POD = "app=nvidia-driver-daemonset"
VALIDATOR_POD = "app=nvidia-operator-validator"
EPS = 0.01


def pods_on(core: k8s.CoreV1Api, node: str, selector: str) -> list[k8s.V1Pod]:
    return core.list_namespaced_pod(
        OPERATOR, label_selector=selector, field_selector=f"spec.nodeName={node}"
    ).items


def driver_pod(core: k8s.CoreV1Api, node: str) -> k8s.V1Pod:
    (pod,) = pods_on(core, node, DRIVER_POD)
    return pod


def validator_pod(core: k8s.CoreV1Api, node: str) -> k8s.V1Pod:
    (pod,) = pods_on(core, node, VALIDATOR_POD)
    return pod


def allocatable(core: k8s.CoreV1Api, node: str) -> str:
    return str(core.read_node(node).status.allocatable[GPU])


def revisions(apps: k8s.AppsV1Api, ds: k8s.V1DaemonSet) -> dict[int, k8s.V1ControllerRevision]:
    owned = [
        r
        for r in apps.list_namespaced_controller_revision(OPERATOR).items
        if any(o.uid == ds.metadata.uid for o in r.metadata.owner_references or [])
    ]
    return {r.revision: r for r in owned}


def driver_set_of(apps: k8s.AppsV1Api, pod: k8s.V1Pod) -> k8s.V1DaemonSet:
    (owner,) = pod.metadata.owner_references
    assert owner.kind == "DaemonSet" and owner.controller
    return apps.read_namespaced_daemon_set(owner.name, OPERATOR)


def image_of(revision: k8s.V1ControllerRevision) -> str:
    return str(revision.data["spec"]["template"]["spec"]["containers"][0]["image"])


def waiting_reason(pod: k8s.V1Pod) -> str | None:
    (status,) = pod.status.container_statuses
    return status.state.waiting.reason if status.state.waiting else None


@pytest.fixture
def healthy(fleet: Callable[[str], ScenarioInfo]) -> ScenarioInfo:
    return fleet("healthy")


def test_every_node_runs_revision_1_while_the_newest_is_revision_2(
    healthy: ScenarioInfo, core: k8s.CoreV1Api, apps: k8s.AppsV1Api
) -> None:
    seen_sets = set()
    for node in healthy.nodes:
        pod = driver_pod(core, node)
        ds = driver_set_of(apps, pod)
        seen_sets.add(ds.metadata.name)
        revs = revisions(apps, ds)
        assert sorted(revs) == [1, 2]
        assert pod.metadata.labels[HASH] == revs[1].metadata.labels[HASH] != revs[2].metadata.labels[HASH]
        assert pod.spec.containers[0].image == image_of(revs[1])
        assert image_of(revs[1]).split(":")[1].startswith("535-")
        assert image_of(revs[2]).split(":")[1].startswith("550-")
        assert is_ready(pod) and is_ready(validator_pod(core, node))
        assert allocatable(core, node) == "8"
        assert core.read_node(node).metadata.labels["nvidia.com/cuda.driver.major"] == "535"
    assert seen_sets == set(healthy.driver_daemonsets)
    for name in healthy.driver_daemonsets:
        status = apps.read_namespaced_daemon_set(name, OPERATOR).status
        assert status.updated_number_scheduled == 0
        assert status.number_ready == status.desired_number_scheduled == 3


def test_deleting_a_driver_pod_brings_the_node_up_on_the_newest_revision(
    healthy: ScenarioInfo, cluster: EmulatedCluster, core: k8s.CoreV1Api, apps: k8s.AppsV1Api
) -> None:
    node = healthy.nodes[0]
    settings = cluster.settings
    old = driver_pod(core, node)
    ds = driver_set_of(apps, old)
    newest = revisions(apps, ds)[2]
    grace = old.spec.termination_grace_period_seconds

    core.delete_namespaced_pod(old.metadata.name, OPERATOR)

    assert allocatable(core, node) == "0"
    validator = validator_pod(core, node)
    assert not is_ready(validator)
    assert [c.reason for c in validator.status.conditions if c.type == "Ready"] == ["DriverNotReady"]

    cluster.advance(grace)  # the old pod is gone; its replacement is not there yet
    assert pods_on(core, node, DRIVER_POD) == []
    cluster.advance(settings.pod_recreate_delay - EPS)
    assert pods_on(core, node, DRIVER_POD) == []
    cluster.advance(EPS)
    new = driver_pod(core, node)
    assert new.metadata.name != old.metadata.name
    assert new.metadata.labels[HASH] == newest.metadata.labels[HASH]
    assert new.spec.containers[0].image == image_of(newest)
    assert not is_ready(new)
    assert [c.reason for c in new.status.conditions if c.type == "Ready"] == ["ContainersNotReady"]
    assert waiting_reason(new) == "ContainerCreating"
    assert allocatable(core, node) == "0"

    cluster.advance(settings.pod_ready_delay - EPS)
    assert not is_ready(driver_pod(core, node))
    cluster.advance(EPS)
    assert is_ready(driver_pod(core, node))
    assert allocatable(core, node) == "8"
    labels = core.read_node(node).metadata.labels
    assert (labels["nvidia.com/cuda.driver.major"], labels["nvidia.com/cuda.driver.minor"]) == ("550", "90")
    assert not is_ready(validator_pod(core, node))

    cluster.advance(settings.validator_ready_delay)
    assert is_ready(validator_pod(core, node))
    assert apps.read_namespaced_daemon_set(ds.metadata.name, OPERATOR).status.updated_number_scheduled == 1
    # The other nodes are untouched.
    for other in healthy.nodes[1:]:
        assert core.read_node(other).metadata.labels["nvidia.com/cuda.driver.major"] == "535"


def test_a_driver_restart_under_running_gpu_pods_is_an_incident(
    healthy: ScenarioInfo, cluster: EmulatedCluster, core: k8s.CoreV1Api
) -> None:
    busy, drained = healthy.nodes[0], healthy.nodes[2]
    gpu_pods = [
        p
        for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={busy}").items
        if any(GPU in (c.resources.limits or {}) for c in p.spec.containers if c.resources)
    ]
    assert gpu_pods, "the scenario runs GPU pods on every node"

    core.delete_namespaced_pod(driver_pod(core, busy).metadata.name, OPERATOR)

    assert len(cluster.daemonsets.incidents) == 1
    incident = cluster.daemonsets.incidents[0]
    assert busy in incident
    assert all(p.metadata.name in incident for p in gpu_pods)

    # Cordon and drain first, and the restart is clean.
    core.patch_node(drained, {"spec": {"unschedulable": True}})
    for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={drained}").items:
        if any(GPU in (c.resources.limits or {}) for c in pod.spec.containers if c.resources):
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    core.delete_namespaced_pod(driver_pod(core, drained).metadata.name, OPERATOR)
    assert len(cluster.daemonsets.incidents) == 1


def test_a_missing_image_leaves_the_new_pod_in_image_pull_back_off(
    fleet: Callable[[str], ScenarioInfo], cluster: EmulatedCluster, core: k8s.CoreV1Api, apps: k8s.AppsV1Api
) -> None:
    info = fleet("missing-image")
    node = info.missing_image_node
    assert node is not None
    old = driver_pod(core, node)
    image = image_of(revisions(apps, driver_set_of(apps, old))[2])

    core.delete_namespaced_pod(old.metadata.name, OPERATOR)
    settings = cluster.settings
    cluster.advance(old.spec.termination_grace_period_seconds + settings.pod_recreate_delay)
    new = driver_pod(core, node)
    assert new.spec.containers[0].image == image
    cluster.advance(settings.image_pull_delay)

    for _ in range(2):  # and it stays that way
        new = driver_pod(core, node)
        assert new.status.phase == "Pending"
        assert not is_ready(new)
        assert waiting_reason(new) == "ImagePullBackOff"
        assert f'"{image}"' in new.status.container_statuses[0].state.waiting.message
        assert allocatable(core, node) == "0"
        assert not is_ready(validator_pod(core, node))
        assert core.read_node(node).metadata.labels["nvidia.com/cuda.driver.major"] == "535"
        cluster.advance(600)

    # Nodes whose image exists come up as usual.
    other = next(n for n in info.nodes if n != node)
    core.delete_namespaced_pod(driver_pod(core, other).metadata.name, OPERATOR)
    cluster.advance(60)
    assert is_ready(driver_pod(core, other)) and allocatable(core, other) == "8"


def test_a_driver_that_fails_validation_keeps_the_gpus_away(
    fleet: Callable[[str], ScenarioInfo], cluster: EmulatedCluster, core: k8s.CoreV1Api
) -> None:
    info = fleet("validation-failure")
    node = info.broken_validation_node
    assert node is not None

    core.delete_namespaced_pod(driver_pod(core, node).metadata.name, OPERATOR)
    cluster.advance(60)

    assert is_ready(driver_pod(core, node))
    validator = validator_pod(core, node)
    assert not is_ready(validator)
    assert [c.reason for c in validator.status.conditions if c.type == "Ready"] == ["ValidationFailed"]
    assert allocatable(core, node) == "0"
    cluster.advance(600)
    assert not is_ready(validator_pod(core, node)) and allocatable(core, node) == "0"


def test_a_rolling_update_restarts_drivers_under_running_jobs_one_at_a_time(
    healthy: ScenarioInfo, cluster: EmulatedCluster, core: k8s.CoreV1Api, apps: k8s.AppsV1Api
) -> None:
    """What upgrader refuses to run beside: with RollingUpdate, Kubernetes itself deletes the old
    driver pods, never more than maxUnavailable unavailable, whatever runs on the GPUs."""
    name = healthy.driver_daemonsets[0]
    body = {"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "34%"}}}}
    apps.patch_namespaced_daemon_set(name, OPERATOR, body)
    status = apps.read_namespaced_daemon_set(name, OPERATOR).status
    assert status.desired_number_scheduled - status.number_ready == 2  # 34% of 3, rounded up
    for _ in range(60):
        cluster.advance(1)
        status = apps.read_namespaced_daemon_set(name, OPERATOR).status
        assert status.desired_number_scheduled - status.number_available <= 2
    assert status.updated_number_scheduled == status.number_ready == 3
    rolled = [i for i in cluster.daemonsets.incidents if "deleted by the DaemonSet controller's RollingUpdate" in i]
    assert len(rolled) == 3 and rolled == cluster.daemonsets.incidents, cluster.daemonsets.incidents
