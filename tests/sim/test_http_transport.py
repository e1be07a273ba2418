"""The official client over real HTTP against `cluster.serve()`: the transport, and watch streaming.

These run on wall-clock time, so they are few and keep their waits short.
"""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import node_body, pod_body, status_of
from tests.sim.conftest import Served


def test_round_trip_and_errors_over_http(served: Served) -> None:
    core = served.core()
    created = core.create_node(node_body("n1", {"pool": "gpu"}))
    patched = core.patch_node("n1", {"spec": {"unschedulable": True}})
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)
    assert [n.metadata.name for n in core.list_node(label_selector="pool=gpu").items] == ["n1"]
    assert core.read_node("n1").spec.unschedulable is True

    with pytest.raises(ApiException) as err:
        core.read_node("missing")
    assert (err.value.status, err.value.reason) == (404, "Not Found")
    assert status_of(err.value)["message"] == 'nodes "missing" not found'

    with pytest.raises(ApiException) as err:
        core.replace_node("n1", created)  # stale resourceVersion
    assert (err.value.status, err.value.reason) == (409, "Conflict")

    log = [(r.method, r.path, r.status) for r in served.cluster.requests]
    assert ("PATCH", "/api/v1/nodes/n1", 200) in log
    assert ("GET", "/api/v1/nodes/missing", 404) in log
    assert ("PUT", "/api/v1/nodes/n1", 409) in log


def test_eviction_refusal_over_http(served: Served) -> None:
    core, policy = served.core(), k8s.PolicyV1Api(served.api_client())
    core.create_node(node_body("node-1"))
    core.create_namespaced_pod("default", pod_body("p", {"app": "x"}))
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {"metadata": {"name": "x"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}},
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction(
            "p", "default", {"metadata": {"name": "p", "namespace": "default"}}
        )
    assert (err.value.status, err.value.reason) == (429, "Too Many Requests")
    assert (
        status_of(err.value)["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    )


def test_watch_streams_changes_made_by_another_thread(served: Served) -> None:
    core = served.core()
    core.create_node(node_body("n1"))
    since = core.list_node().metadata.resource_version

    def writer() -> None:
        other = served.core()
        time.sleep(0.3)  # let the watch connect first; it must deliver these as they happen
        other.patch_node("n1", {"metadata": {"labels": {"x": "y"}}})
        other.create_node(node_body("n2"))
        other.delete_node("n2")

    thread = threading.Thread(target=writer)
    thread.start()
    events: list[tuple[str, str]] = []
    w = watch.Watch()
    started = time.monotonic()
    for event in w.stream(core.list_node, resource_version=since, timeout_seconds=10):
        events.append((event["type"], event["object"].metadata.name))
        if len(events) == 3:
            w.stop()
    elapsed = time.monotonic() - started
    thread.join()

    assert events == [("MODIFIED", "n1"), ("ADDED", "n2"), ("DELETED", "n2")]
    assert elapsed < 9, "events arrived only when the stream timed out"


def test_watch_with_a_selector_streams_only_matching_pods(served: Served) -> None:
    core = served.core()
    core.create_node(node_body("node-1"))
    since = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod_body("wanted", {"app": "a"}, node=None))
    core.create_namespaced_pod("default", pod_body("other", {"app": "b"}, node=None))
    core.patch_namespaced_pod("wanted", "default", {"metadata": {"labels": {"app": "b"}}})

    w = watch.Watch()
    events = []
    for e in w.stream(
        core.list_namespaced_pod, "default", label_selector="app=a", resource_version=since, timeout_seconds=5
    ):
        events.append((e["type"], e["object"].metadata.name, e["object"].metadata.labels["app"]))
        if len(events) == 2:  # `other` was created between these two: had it leaked, it would be here
            w.stop()

    assert events == [("ADDED", "wanted", "a"), ("DELETED", "wanted", "a")]


def test_a_quiet_watch_ends_at_its_timeout(served: Served) -> None:
    core = served.core()
    since = core.list_node().metadata.resource_version
    started = time.monotonic()
    events = list(watch.Watch().stream(core.list_node, resource_version=since, timeout_seconds=1))
    assert events == []
    assert time.monotonic() - started >= 0.9
