"""Watch, graceful pod deletion and the in-process transport, through the official client.

In-process on a virtual clock: a watch yields what is queued and ends, and time only moves with
`cluster.advance()`.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import names, node_body, pod_body, rv, watch_events
from upgrader.sim.apiserver.clock import VIRTUAL_EPOCH
from upgrader.sim.cluster import EmulatedCluster

# ----- watch ---------------------------------------------------------------------------------


def test_watch_nodes_from_a_resource_version(core: k8s.CoreV1Api) -> None:
    core.create_node(node_body("old"))
    since = core.list_node().metadata.resource_version
    core.create_node(node_body("n1"))
    core.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})
    core.delete_node("n1")

    events = watch_events(core.list_node, resource_version=since)

    assert [(t, o.metadata.name) for t, o in events] == [
        ("ADDED", "n1"),
        ("MODIFIED", "n1"),
        ("DELETED", "n1"),
    ]
    assert all(isinstance(o, k8s.V1Node) for _, o in events)
    versions = [rv(o) for _, o in events]
    assert versions == sorted(versions) and versions[0] > int(since)
    assert events[2][1].metadata.labels == {"x": "1"}  # DELETED carries the last state


def test_watch_without_resource_version_starts_with_the_current_objects(core: k8s.CoreV1Api) -> None:
    core.create_node(node_body("n1"))
    core.create_node(node_body("n2"))
    assert [(t, o.metadata.name) for t, o in watch_events(core.list_node)] == [
        ("ADDED", "n1"),
        ("ADDED", "n2"),
    ]


def test_watch_pods_in_one_namespace(core: k8s.CoreV1Api, cluster: EmulatedCluster) -> None:
    core.create_namespace({"metadata": {"name": "other"}})
    since = core.list_namespaced_pod("default").metadata.resource_version
    cluster.create("pods", pod_body("p", node=None), "default")
    cluster.create("pods", pod_body("elsewhere", node=None), "other")
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"v": "2"}}})
    core.delete_namespaced_pod("p", "default")  # not on a node: goes at once

    events = watch_events(core.list_namespaced_pod, "default", resource_version=since)

    assert [(t, o.metadata.name) for t, o in events] == [("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p")]
    assert all(isinstance(o, k8s.V1Pod) for _, o in events)


def test_a_label_change_out_of_the_selector_is_a_deleted_event(core: k8s.CoreV1Api) -> None:
    core.create_node(node_body("n1", {"pool": "gpu"}))
    since = core.list_node().metadata.resource_version
    moved = core.patch_node("n1", {"metadata": {"labels": {"pool": "cpu"}}})
    core.patch_node("n1", {"metadata": {"labels": {"pool": "gpu"}}})

    events = watch_events(core.list_node, label_selector="pool=gpu", resource_version=since)

    assert [t for t, _ in events] == ["DELETED", "ADDED"]
    gone = events[0][1]
    # As the API server does: the last content that matched, at the resourceVersion of the change.
    assert gone.metadata.labels == {"pool": "gpu"}
    assert rv(gone) == rv(moved)


# ----- graceful pod deletion -----------------------------------------------------------------


def test_a_pod_terminates_gracefully_then_goes(core: k8s.CoreV1Api, cluster: EmulatedCluster) -> None:
    core.create_node(node_body("node-1"))
    cluster.create("pods", pod_body("p", grace=30), "default")
    since = core.list_namespaced_pod("default").metadata.resource_version

    answered = core.delete_namespaced_pod("p", "default")

    assert answered.metadata.deletion_grace_period_seconds == 30
    assert answered.metadata.deletion_timestamp.timestamp() == VIRTUAL_EPOCH + 30
    cluster.advance(29.9)
    listed = core.list_namespaced_pod("default").items
    assert names(listed) == ["p"] and listed[0].metadata.deletion_timestamp is not None
    cluster.advance(0.1)
    assert core.list_namespaced_pod("default").items == []
    events = watch_events(core.list_namespaced_pod, "default", resource_version=since)
    assert [t for t, _ in events] == ["MODIFIED", "DELETED"]


def test_grace_zero_and_unscheduled_pods_go_at_once(core: k8s.CoreV1Api, cluster: EmulatedCluster) -> None:
    cluster.create("pods", pod_body("bound", grace=30), "default")
    cluster.create("pods", pod_body("unbound", node=None, grace=30), "default")
    core.delete_namespaced_pod("bound", "default", grace_period_seconds=0)
    core.delete_namespaced_pod("unbound", "default")
    assert core.list_namespaced_pod("default").items == []


def test_a_shorter_grace_period_counts_from_the_first_deletion(
    core: k8s.CoreV1Api, cluster: EmulatedCluster
) -> None:
    cluster.create("pods", pod_body("p", grace=60), "default")
    core.delete_namespaced_pod("p", "default")
    cluster.advance(10)
    shortened = core.delete_namespaced_pod("p", "default", grace_period_seconds=20)
    assert shortened.metadata.deletion_timestamp.timestamp() == VIRTUAL_EPOCH + 20
    cluster.advance(9.9)
    assert names(core.list_namespaced_pod("default").items) == ["p"]
    cluster.advance(0.1)
    assert core.list_namespaced_pod("default").items == []


def test_a_longer_grace_period_does_not_extend_termination(
    core: k8s.CoreV1Api, cluster: EmulatedCluster
) -> None:
    cluster.create("pods", pod_body("p", grace=10), "default")
    core.delete_namespaced_pod("p", "default")
    again = core.delete_namespaced_pod("p", "default", grace_period_seconds=300)
    assert again.metadata.deletion_grace_period_seconds == 10
    cluster.advance(10)
    assert core.list_namespaced_pod("default").items == []


# ----- the in-process transport ----------------------------------------------------------------


def test_raw_responses_and_the_request_log(core: k8s.CoreV1Api, cluster: EmulatedCluster) -> None:
    core.create_node(node_body("n1"))
    raw = core.read_node("n1", _preload_content=False)
    assert raw.status == 200
    assert raw.json()["kind"] == "Node" and json.loads(raw.data)["metadata"]["name"] == "n1"
    with pytest.raises(ApiException):
        core.read_node("nope")

    create, get, missing = cluster.requests[-3:]
    assert (create.verb, create.method, create.path, create.status) == (
        "create",
        "POST",
        "/api/v1/nodes",
        201,
    )
    assert create.body["metadata"]["name"] == "n1"
    assert (get.verb, get.name, get.status) == ("get", "n1", 200)
    assert (missing.verb, missing.resource, missing.name, missing.status) == ("get", "nodes", "nope", 404)
    assert create.user_agent.startswith("OpenAPI-Generator/")
