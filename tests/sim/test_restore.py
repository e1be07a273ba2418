"""An API server that comes back older (restored from an earlier etcd backup), in process on a
virtual clock: objects and resourceVersions go back, and the cluster's behaviours carry on from
the restored objects. What becomes of watches and informers is in test_restore_watches.py."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import is_ready, names, node_body, pod_body, rv, watch_events
from tests.sim.restore_helpers import MERGE, label, nodes_after_restore
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import JOB_RUN_SECONDS
from upgrader.sim.fleets.scenarios import build

# ----- objects and versions ------------------------------------------------------------------


def test_the_objects_and_versions_of_the_backup_are_served_again(
    cluster: EmulatedCluster, core: k8s.CoreV1Api
) -> None:
    core.create_node(node_body("n1", {"x": "before"}))
    core.create_node(node_body("n2"))
    backed_up = {n.metadata.name: rv(n) for n in core.list_node().items}
    backup = cluster.backup()
    label(cluster, "n1", "after")
    core.delete_node("n2")
    core.create_node(node_body("n3"))
    seen = int(core.list_node().metadata.resource_version)

    cluster.restore_from(backup)

    listing = core.list_node()
    assert names(listing.items) == ["n1", "n2"]
    assert {n.metadata.name: rv(n) for n in listing.items} == backed_up
    assert listing.items[0].metadata.labels == {"x": "before"}
    assert int(listing.metadata.resource_version) == backup.resource_version < seen
    written = core.patch_node("n1", {"spec": {"unschedulable": True}})
    assert rv(written) == backup.resource_version + 1, "versions clients saw before are handed out again"


def test_a_backup_restores_again_and_is_not_changed_by_later_writes(
    cluster: EmulatedCluster, core: k8s.CoreV1Api
) -> None:
    core.create_node(node_body("n1", {"x": "before"}))
    backup = cluster.backup()
    for value in ("one", "two"):
        label(cluster, "n1", value)
        cluster.restore_from(backup)
        assert core.read_node("n1").metadata.labels == {"x": "before"}
    assert backup.count() == len(cluster.store.objects(cluster.type("nodes"))) + len(
        cluster.store.objects(cluster.type("namespaces"))
    )


@pytest.mark.parametrize("content_type", [MERGE, "application/strategic-merge-patch+json"])
def test_a_write_never_changes_a_stored_object_in_place(cluster: EmulatedCluster, content_type: str) -> None:
    """A backup holds the stored objects themselves, so no write may change one in place (a patch
    leaving metadata alone once shared the stored metadata, and moved its resourceVersion)."""
    deployments = cluster.type("deployments", "apps")
    cluster.create("deployments", {"metadata": {"name": "d"}, "spec": {"replicas": 1}}, "default", "apps")
    held = cluster.get("deployments", "d", "default", "apps")
    assert held is not None
    kept = copy.deepcopy(held)
    backup = cluster.backup()
    cluster.store.patch(deployments, "default", "d", content_type, {"spec": {"replicas": 2}})
    assert held == kept
    written = cluster.get("deployments", "d", "default", "apps")
    assert written is not None and written["metadata"]["generation"] == kept["metadata"]["generation"] + 1
    cluster.restore_from(backup)
    assert cluster.get("deployments", "d", "default", "apps") == kept


def test_bump_revision_moves_versions_on_and_every_resumed_watch_is_gone(
    cluster: EmulatedCluster, core: k8s.CoreV1Api
) -> None:
    seen = nodes_after_restore(cluster, core, bump_revision=1000)
    listing = core.list_node()
    assert int(listing.metadata.resource_version) > seen
    assert names(listing.items) == ["n1", "n2"]
    with pytest.raises(ApiException) as gone:
        watch_events(core.list_node, resource_version=str(seen))
    assert gone.value.status == 410


# ----- the behaviours carry on from the restored objects ---------------------------------------


def test_a_driver_pod_starting_at_the_backup_comes_up_after_the_restore(
    cluster: EmulatedCluster, core: k8s.CoreV1Api
) -> None:
    info = build(cluster, "healthy")
    node, settings = info.nodes[0], cluster.settings
    on_node = {"label_selector": "app=nvidia-driver-daemonset", "field_selector": f"spec.nodeName={node}"}
    (old,) = core.list_namespaced_pod("gpu-operator", **on_node).items
    core.delete_namespaced_pod(old.metadata.name, "gpu-operator", grace_period_seconds=0)
    cluster.advance(settings.pod_recreate_delay)
    (new,) = core.list_namespaced_pod("gpu-operator", **on_node).items
    assert not is_ready(new)
    backup = cluster.backup()
    cluster.advance(settings.pod_ready_delay + settings.validator_ready_delay + 1)
    assert is_ready(core.read_namespaced_pod(new.metadata.name, "gpu-operator"))

    cluster.restore_from(backup)
    assert not is_ready(core.read_namespaced_pod(new.metadata.name, "gpu-operator"))
    cluster.advance(settings.pod_ready_delay + settings.validator_ready_delay + 1)
    assert is_ready(core.read_namespaced_pod(new.metadata.name, "gpu-operator"))
    assert core.read_node(node).status.allocatable["nvidia.com/gpu"] != "0"


def test_a_pod_terminating_at_the_backup_goes_as_its_deletion_timestamp_says(
    cluster: EmulatedCluster, core: k8s.CoreV1Api
) -> None:
    core.create_node(node_body("node-1"))
    cluster.create("pods", pod_body("p", grace=30), "default")
    core.delete_namespaced_pod("p", "default")
    cluster.advance(10)
    backup = cluster.backup()
    cluster.advance(25)
    assert names(core.list_namespaced_pod("default").items) == []
    cluster.restore_from(backup)  # terminating again, its grace period over and its timer spent
    assert cluster.get("pods", "p", "default") is not None
    assert names(core.list_namespaced_pod("default").items) == [], "not left terminating for ever"


def test_a_pod_deleted_after_the_backup_is_back_and_stays(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
    core.create_node(node_body("node-1"))
    cluster.create("pods", pod_body("p", grace=30), "default")
    backup = cluster.backup()
    core.delete_namespaced_pod("p", "default")
    cluster.restore_from(backup)  # before its grace period is over: its removal is still pending
    cluster.advance(60)
    pod = core.read_namespaced_pod("p", "default")
    assert pod.metadata.deletion_timestamp is None and is_ready(pod)


def test_a_job_pod_running_at_the_backup_finishes_once_after_the_restore(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    core.create_node(node_body("node-1"))
    spec = {"restartPolicy": "Never", "containers": [{"name": "eval", "image": "registry.example/eval:1"}]}
    batch.create_namespaced_job(
        "default",
        {"metadata": {"name": "eval", "annotations": {JOB_RUN_SECONDS: "10"}}, "spec": {"template": {"spec": spec}}},
    )
    cluster.advance(4)
    backup = cluster.backup()
    cluster.advance(3)
    cluster.restore_from(backup)  # its finish is pending, and armed again from the restored pod
    (pod,) = core.list_namespaced_pod("default").items
    cluster.advance(3 - 0.01)
    assert core.read_namespaced_pod(pod.metadata.name, "default").status.phase == "Running"
    cluster.advance(0.01)
    assert core.read_namespaced_pod(pod.metadata.name, "default").status.phase == "Succeeded"
    assert batch.read_namespaced_job("eval", "default").status.succeeded == 1
    cluster.advance(5)
    assert batch.read_namespaced_job("eval", "default").status.succeeded == 1

    cluster.restore_from(backup)  # long after it finished (the timer is spent): it finishes at once
    assert core.read_namespaced_pod(pod.metadata.name, "default").status.phase == "Succeeded"
    assert batch.read_namespaced_job("eval", "default").status.succeeded == 1


def test_a_custom_resource_type_defined_after_the_backup_is_no_longer_served(cluster: EmulatedCluster) -> None:
    backup = cluster.backup()
    cluster.create(
        "customresourcedefinitions",
        {
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": True}],
            },
        },
        group="apiextensions.k8s.io",
    )
    assert cluster.store.registry.lookup("example.com", "v1", "widgets") is not None
    cluster.restore_from(backup)
    assert cluster.store.registry.lookup("example.com", "v1", "widgets") is None
    assert cluster.store.registry.lookup("nvidia.com", "v1alpha1", "nvidiadrivers") is not None
