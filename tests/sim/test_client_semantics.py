"""API semantics seen through the official `kubernetes` client, in-process on a virtual clock.

Resource versions and optimistic concurrency, the error Status shapes clients parse, and the three
patch formats. Selectors and paging are in test_client_lists.py, watch and graceful deletion in
test_client_watch.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import node_body, pod_body, rv, status_of
from upgrader.sim.cluster import EmulatedCluster

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
CONFLICT_TAIL = "the object has been modified; please apply your changes to the latest version and try again"


# ----- resourceVersion and optimistic concurrency -----------------------------------------


def test_every_write_bumps_the_resource_version_and_a_no_op_does_not(core: k8s.CoreV1Api) -> None:
    created = core.create_node(node_body("n1"))
    patched = core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    status = core.patch_node_status("n1", {"status": {"allocatable": {"nvidia.com/gpu": "0"}}})
    current = core.read_node("n1")
    current.metadata.labels["b"] = "2"
    replaced = core.replace_node("n1", current)
    versions = [rv(created), rv(patched), rv(status), rv(replaced)]
    assert versions == sorted(set(versions)), versions

    same = core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    assert rv(same) == rv(replaced)
    assert int(core.list_node().metadata.resource_version) >= rv(replaced)
    assert core.read_node("n1").status.allocatable["nvidia.com/gpu"] == "0"


def test_replace_with_a_stale_resource_version_is_a_conflict(core: k8s.CoreV1Api) -> None:
    stale = core.create_node(node_body("n1", {"keep": "me"}))
    core.patch_node("n1", {"metadata": {"labels": {"other": "writer"}}})
    stale.metadata.labels["mine"] = "lost"

    with pytest.raises(ApiException) as err:
        core.replace_node("n1", stale)

    assert err.value.status == 409
    assert err.value.reason == "Conflict"
    body = status_of(err.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == f'Operation cannot be fulfilled on nodes "n1": {CONFLICT_TAIL}'
    assert body["details"] == {"name": "n1", "kind": "nodes"}
    assert core.read_node("n1").metadata.labels == {"keep": "me", "other": "writer"}

    fresh = core.read_node("n1")
    fresh.metadata.labels["mine"] = "kept"
    assert core.replace_node("n1", fresh).metadata.labels["mine"] == "kept"


@pytest.mark.parametrize(
    ("content_type", "make_patch"),
    [
        (MERGE, lambda stale: {"metadata": {"resourceVersion": stale, "labels": {"x": "y"}}}),
        (STRATEGIC, lambda stale: {"metadata": {"resourceVersion": stale, "labels": {"x": "y"}}}),
        (
            JSON_PATCH,
            lambda stale: [
                {"op": "replace", "path": "/metadata/resourceVersion", "value": stale},
                {"op": "add", "path": "/metadata/labels/x", "value": "y"},
            ],
        ),
    ],
    ids=["merge", "strategic", "json-patch"],
)
def test_patch_carrying_a_stale_resource_version_is_a_conflict(
    core: k8s.CoreV1Api, content_type: str, make_patch: Any
) -> None:
    stale = core.create_node(node_body("n1", {"a": "1"})).metadata.resource_version
    current = core.patch_node("n1", {"metadata": {"labels": {"a": "2"}}}).metadata.resource_version

    with pytest.raises(ApiException) as err:
        core.patch_node("n1", make_patch(stale), _content_type=content_type)
    assert err.value.status == 409
    assert status_of(err.value)["reason"] == "Conflict"
    assert "x" not in core.read_node("n1").metadata.labels

    applied = core.patch_node("n1", make_patch(current), _content_type=content_type)
    assert applied.metadata.labels == {"a": "2", "x": "y"}


def test_creating_an_existing_object_is_already_exists(core: k8s.CoreV1Api, policy: k8s.PolicyV1Api) -> None:
    core.create_node(node_body("n1"))
    with pytest.raises(ApiException) as err:
        core.create_node(node_body("n1"))
    assert (err.value.status, err.value.reason) == (409, "Conflict")
    body = status_of(err.value)
    assert (body["reason"], body["message"]) == ("AlreadyExists", 'nodes "n1" already exists')

    pdb = {"metadata": {"name": "b"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}}
    policy.create_namespaced_pod_disruption_budget("default", pdb)
    with pytest.raises(ApiException) as err:
        policy.create_namespaced_pod_disruption_budget("default", pdb)
    assert status_of(err.value)["message"] == 'poddisruptionbudgets.policy "b" already exists'


@pytest.mark.parametrize(
    ("read", "message", "details"),
    [
        (lambda c: k8s.CoreV1Api(c).read_node("x"), 'nodes "x" not found', {"name": "x", "kind": "nodes"}),
        (
            lambda c: k8s.CoreV1Api(c).read_namespaced_pod("x", "default"),
            'pods "x" not found',
            {"name": "x", "kind": "pods"},
        ),
        (
            lambda c: k8s.AppsV1Api(c).read_namespaced_daemon_set("x", "default"),
            'daemonsets.apps "x" not found',
            {"name": "x", "kind": "daemonsets", "group": "apps"},
        ),
        (
            lambda c: k8s.CoreV1Api(c).delete_namespaced_pod("x", "default"),
            'pods "x" not found',
            {"name": "x", "kind": "pods"},
        ),
        (
            lambda c: k8s.CoreV1Api(c).patch_node("x", {"spec": {"unschedulable": True}}),
            'nodes "x" not found',
            {"name": "x", "kind": "nodes"},
        ),
    ],
    ids=["get-node", "get-pod", "get-daemonset", "delete-pod", "patch-node"],
)
def test_not_found_has_the_real_message_shape(
    api_client: k8s.ApiClient, read: Any, message: str, details: dict[str, str]
) -> None:
    with pytest.raises(ApiException) as err:
        read(api_client)
    assert (err.value.status, err.value.reason) == (404, "Not Found")
    body = status_of(err.value)
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "NotFound",
        "details": details,
        "code": 404,
    }


def test_delete_preconditions_guard_uid_and_resource_version(core: k8s.CoreV1Api) -> None:
    node = core.create_node(node_body("n1"))
    uid, version = node.metadata.uid, node.metadata.resource_version

    with pytest.raises(ApiException) as err:
        core.delete_node("n1", body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid="not-it")))
    assert err.value.status == 409
    assert status_of(err.value)["reason"] == "Conflict"
    assert status_of(err.value)["message"] == (
        f'Operation cannot be fulfilled on nodes "n1": Precondition failed: '
        f"UID in precondition: not-it, UID in object meta: {uid}"
    )

    core.patch_node("n1", {"metadata": {"labels": {"moved": "on"}}})
    newer = core.read_node("n1").metadata.resource_version
    with pytest.raises(ApiException) as err:
        core.delete_node(
            "n1", body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(resource_version=version))
        )
    assert status_of(err.value)["message"].endswith(
        f"Precondition failed: ResourceVersion in precondition: {version}, "
        f"ResourceVersion in object meta: {newer}"
    )
    assert core.read_node("n1").metadata.uid == uid  # still there

    raw = core.delete_node(
        "n1",
        body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid, resource_version=newer)),
        _preload_content=False,
    )
    # Nodes are not returned on delete: the answer is a Status naming what went.
    assert json.loads(raw.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "n1", "kind": "nodes", "uid": uid},
    }
    assert core.list_node().items == []


# ----- patch formats -------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [MERGE, STRATEGIC], ids=["merge", "strategic"])
def test_object_patches_edit_labels_annotations_and_unschedulable(
    core: k8s.CoreV1Api, content_type: str
) -> None:
    core.create_node(node_body("n1", {"keep": "1", "drop": "2"}))

    core.patch_node(
        "n1",
        {
            "metadata": {"labels": {"add": "3"}, "annotations": {"example.com/why": "upgrade"}},
            "spec": {"unschedulable": True},
        },
        _content_type=content_type,
    )
    node = core.read_node("n1")
    assert node.metadata.labels == {"keep": "1", "drop": "2", "add": "3"}
    assert node.metadata.annotations == {"example.com/why": "upgrade"}
    assert node.spec.unschedulable is True

    core.patch_node(
        "n1",
        {
            "metadata": {"labels": {"drop": None}, "annotations": {"example.com/why": None}},
            "spec": {"unschedulable": None},
        },
        _content_type=content_type,
    )
    node = core.read_node("n1")
    assert node.metadata.labels == {"keep": "1", "add": "3"}
    assert not node.metadata.annotations
    assert node.spec.unschedulable is None


def test_default_patch_content_type_for_an_object_is_strategic_merge(
    core: k8s.CoreV1Api, cluster: EmulatedCluster
) -> None:
    core.create_node(node_body("n1"))
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    record = cluster.requests[-1]
    assert (record.verb, record.body) == ("patch", {"spec": {"unschedulable": True}})
    assert core.read_node("n1").spec.unschedulable is True


def test_json_patch_with_a_failing_test_op_changes_nothing(core: k8s.CoreV1Api) -> None:
    before = core.create_node(node_body("n1", {"nvidia.com/gpu-driver-upgrade-state": "upgrade-required"}))
    path = "/metadata/labels/nvidia.com~1gpu-driver-upgrade-state"

    with pytest.raises(ApiException) as err:
        core.patch_node(
            "n1",
            [
                {"op": "add", "path": "/metadata/labels/touched", "value": "yes"},
                {"op": "test", "path": path, "value": "cordon-required"},
                {"op": "replace", "path": path, "value": "wait-for-jobs-required"},
            ],
        )
    assert err.value.status == 422
    body = status_of(err.value)
    assert body["reason"] == "Invalid"
    assert f"testing value {path} failed" in body["message"]
    after = core.read_node("n1")
    assert after.metadata.labels == {"nvidia.com/gpu-driver-upgrade-state": "upgrade-required"}
    assert rv(after) == rv(before)

    done = core.patch_node(
        "n1",
        [
            {"op": "test", "path": path, "value": "upgrade-required"},
            {"op": "replace", "path": path, "value": "cordon-required"},
        ],
    )
    assert done.metadata.labels == {"nvidia.com/gpu-driver-upgrade-state": "cordon-required"}


# ----- what the server always sends --------------------------------------------------------


def test_fields_go_always_serialises_are_filled_in(core: k8s.CoreV1Api, cluster: EmulatedCluster) -> None:
    # Seeded objects often leave out zero values the real server always sends; the generated
    # client's models require them (a ContainerStatus without imageID does not deserialise).
    node = node_body("n1")
    node["status"]["nodeInfo"] = {"kubeletVersion": "v1.32.4"}
    cluster.create("nodes", node)
    pod = pod_body("p")
    pod["status"]["containerStatuses"] = [{"name": "main", "state": {"running": {}}}]
    cluster.create("pods", pod, "default")

    (status,) = core.read_namespaced_pod("p", "default").status.container_statuses
    assert (status.name, status.image, status.image_id, status.ready, status.restart_count) == (
        "main",
        "",
        "",
        False,
        0,
    )
    info = core.read_node("n1").status.node_info
    assert (info.kubelet_version, info.machine_id, info.kube_proxy_version) == ("v1.32.4", "", "")
