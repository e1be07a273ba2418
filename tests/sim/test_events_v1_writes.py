"""events.k8s.io/v1 Events in process on a virtual clock: field selectors in the group's own field
names, a watch that sees core writes as events.k8s.io/v1, and writes through the view (update, patch,
delete, a duplicate name, the group's own create checks), each on the one stored core Event."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import status_of, watch_events
from tests.sim.events_v1_helpers import CORE, V1, V1_EVENT, answer, call, record_node_events
from tests.sim.events_v1_helpers import events_v1 as events_v1
from upgrader.kube.events import event_name
from upgrader.sim.cluster import EmulatedCluster

# ----- selectors, watch, writes ---------------------------------------------------------------


def test_field_selectors_use_the_group_s_own_field_names(cluster: EmulatedCluster) -> None:
    halted, cordoned = record_node_events(cluster)
    answer(cluster, "POST", f"{V1}/namespaces/default/events", body=V1_EVENT)

    def selected(selector: str) -> list[str]:
        listed = answer(cluster, "GET", f"{V1}/events", f"fieldSelector={quote(selector)}")
        return [e["metadata"]["name"] for e in listed["items"]]

    assert selected("regarding.name=gpu-a-02") == [event_name(cordoned)]
    assert selected("regarding.kind=Node,type=Warning") == [event_name(halted), "gpu-b-01.drained"]
    assert selected("reportingController=example.com/gpu-driver-upgrader") == ["gpu-b-01.drained"]
    assert selected("source=gpu-driver-upgrader,reason=GPUDriverUpgrade") == [event_name(halted), event_name(cordoned)]
    assert selected("metadata.name!=gpu-b-01.drained,regarding.uid=uid-gpu-a-01") == [event_name(halted)]
    # Label selectors work as in core.
    labelled = answer(cluster, "GET", f"{V1}/events", "labelSelector=app%3Dupgrader")["items"]
    assert [e["metadata"]["name"] for e in labelled] == ["gpu-b-01.drained"]


def test_a_core_field_name_is_refused_as_the_server_refuses_it(cluster: EmulatedCluster) -> None:
    response = call(cluster, "GET", f"{V1}/events", "fieldSelector=involvedObject.name%3Dgpu-a-01")
    assert response.status == 400
    status = json.loads(response.body)
    assert (status["reason"], status["message"]) == ("BadRequest", "field label not supported: involvedObject.name")
    assert call(cluster, "GET", f"{V1}/events", "watch=true&fieldSelector=message%3Dx").status == 400


def test_a_watch_sees_core_writes_as_events_v1(cluster: EmulatedCluster, events_v1: k8s.EventsV1Api) -> None:
    since = events_v1.list_event_for_all_namespaces().metadata.resource_version
    halted, cordoned = record_node_events(cluster)  # create, create, patch (count 2)
    answer(cluster, "DELETE", f"{CORE}/namespaces/default/events/{event_name(cordoned)}")

    events = watch_events(events_v1.list_event_for_all_namespaces, resource_version=since)
    assert [(t, e.metadata.name) for t, e in events] == [
        ("ADDED", event_name(halted)),
        ("ADDED", event_name(cordoned)),
        ("MODIFIED", event_name(halted)),
        ("DELETED", event_name(cordoned)),
    ]
    assert all(isinstance(e, k8s.EventsV1Event) for _, e in events)
    assert [e.deprecated_count for _, e in events[:3]] == [1, 1, 2]
    assert events[3][1].note == "cordoned"

    selected = watch_events(events_v1.list_namespaced_event, "default", field_selector="regarding.name=gpu-a-02")
    assert [(t, e.regarding.name) for t, e in selected] == []  # deleted above
    query = f"watch=true&resourceVersion={since}&fieldSelector=regarding.name%3Dgpu-a-02"
    raw = call(cluster, "GET", f"{V1}/events", query)
    assert raw.watcher is not None
    assert [(t, o["apiVersion"], o["note"]) for t, o in raw.watcher.drain()] == [
        ("ADDED", "events.k8s.io/v1", "cordoned"),
        ("DELETED", "events.k8s.io/v1", "cordoned"),
    ]


def test_update_and_patch_through_the_view_write_the_one_event(cluster: EmulatedCluster) -> None:
    created = answer(cluster, "POST", f"{V1}/namespaces/default/events", body=V1_EVENT)
    path = f"{V1}/namespaces/default/events/gpu-b-01.drained"
    series = {"count": 2, "lastObservedTime": "2023-11-14T22:14:20.000000Z"}
    patched = answer(cluster, "PATCH", path, body={"series": series}, content_type="application/merge-patch+json")
    assert patched["series"] == series and patched["note"] == V1_EVENT["note"]
    core = answer(cluster, "GET", f"{CORE}/namespaces/default/events/gpu-b-01.drained")
    assert core["series"] == series
    versions = [o["metadata"]["resourceVersion"] for o in (created, patched, core)]
    assert versions[0] != versions[1] == versions[2]

    # Labels, as the series, may change through this group (its other fields are immutable there).
    labels = {"app": "upgrader", "seen": "twice"}
    stale = call(cluster, "PUT", path, body={**created, "metadata": {**created["metadata"], "labels": labels}})
    assert stale.status == 409  # created's resourceVersion is no longer the stored one
    assert 'on events.events.k8s.io "gpu-b-01.drained"' in json.loads(stale.body)["message"]
    updated = answer(cluster, "PUT", path, body={**patched, "metadata": {**patched["metadata"], "labels": labels}})
    stored = answer(cluster, "GET", f"{CORE}/namespaces/default/events/gpu-b-01.drained")
    assert stored["metadata"]["labels"] == updated["metadata"]["labels"] == labels
    assert stored["series"] == updated["series"] == series
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]


def test_delete_through_either_group_removes_the_one_event(
    cluster: EmulatedCluster, events_v1: k8s.EventsV1Api
) -> None:
    made = answer(cluster, "POST", f"{V1}/namespaces/default/events", body=V1_EVENT)
    deleted = answer(cluster, "DELETE", f"{V1}/namespaces/default/events/gpu-b-01.drained")
    assert (deleted["kind"], deleted["status"]) == ("Status", "Success")
    uid = made["metadata"]["uid"]
    assert deleted["details"] == {"name": "gpu-b-01.drained", "group": "events.k8s.io", "kind": "events", "uid": uid}
    assert call(cluster, "GET", f"{CORE}/namespaces/default/events/gpu-b-01.drained").status == 404

    with pytest.raises(ApiException) as missing:
        events_v1.read_namespaced_event("gpu-b-01.drained", "default")
    status = status_of(missing.value)
    assert (missing.value.status, status["message"]) == (404, 'events.events.k8s.io "gpu-b-01.drained" not found')
    assert status["details"] == {"name": "gpu-b-01.drained", "group": "events.k8s.io", "kind": "events"}

    record_node_events(cluster)
    answer(cluster, "DELETE", f"{V1}/namespaces/default/events")  # deletecollection
    assert answer(cluster, "GET", f"{CORE}/events")["items"] == []


def test_a_duplicate_name_across_groups_already_exists(cluster: EmulatedCluster) -> None:
    first = {"metadata": {"name": "gpu-b-01.drained"}, "message": "x"}
    answer(cluster, "POST", f"{CORE}/namespaces/default/events", body=first)
    again = call(cluster, "POST", f"{V1}/namespaces/default/events", body=V1_EVENT)
    assert again.status == 409
    assert json.loads(again.body)["message"] == 'events.events.k8s.io "gpu-b-01.drained" already exists'


def test_a_create_through_events_k8s_io_is_checked_as_the_server_checks_it(cluster: EmulatedCluster) -> None:
    bad = {
        "metadata": {"name": "bad", "namespace": "gpu-operator"},
        "regarding": {"kind": "Node", "name": "gpu-b-01"},
        "note": "x",
        "type": "Info",
        "deprecatedCount": 3,
    }
    cluster.create("namespaces", {"metadata": {"name": "gpu-operator"}})
    response = call(cluster, "POST", f"{V1}/namespaces/gpu-operator/events", body=bad)
    assert response.status == 422
    status = json.loads(response.body)
    assert status["message"] == (
        'Event.events.k8s.io "bad" is invalid: [involvedObject.namespace: Invalid value: "": does not match '
        'event.namespace, eventTime: Required value, type: Invalid value: "": has invalid value: Info, '
        'count: Invalid value: "": needs to be unset]'
    )
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == [
        ("involvedObject.namespace", "FieldValueInvalid"),
        ("eventTime", "FieldValueRequired"),
        ("type", "FieldValueInvalid"),
        ("count", "FieldValueInvalid"),
    ]
    timed = {**bad, "metadata": {"name": "bad"}, "eventTime": V1_EVENT["eventTime"], "type": "Normal"}
    del timed["deprecatedCount"]
    missing = json.loads(call(cluster, "POST", f"{V1}/namespaces/default/events", body=timed).body)
    assert [c["field"] for c in missing["details"]["causes"]] == [
        "reportingController",
        "reportingController",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ]
    # The same content is a valid core Event: the strict rules are this group's only.
    core_body = {"metadata": {"name": "bad"}, "involvedObject": bad["regarding"], "message": "x", "count": 3}
    assert call(cluster, "POST", f"{CORE}/namespaces/default/events", body=core_body).status == 201
    assert answer(cluster, "GET", f"{CORE}/events")["items"][0]["metadata"]["name"] == "bad"
