"""events.k8s.io/v1 Events are the core/v1 Events the emulator stores, in a second view.

As on kube-apiserver, one stored Event is served in both groups: created through either, it has
one name, uid and resourceVersion, and each group shows it with its own field names (`regarding`
and `note` here, `involvedObject` and `message` there). In process on a virtual clock (raw requests
for exact answers, the official client for its models, which are generated from Kubernetes' OpenAPI
schema), then the real kubectl against a served emulator.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import status_of, watch_events
from upgrader.controller.settings import Settings
from upgrader.core.actions import Event
from upgrader.kube.api import KubeApi
from upgrader.kube.events import EventRecorder, event_name
from upgrader.sim.apiserver.api import Request, Response
from upgrader.sim.cluster import EmulatedCluster

Obj = dict[str, Any]
V1 = "/apis/events.k8s.io/v1"
CORE = "/api/v1"
NOW = 1_700_000_000  # 2023-11-14T22:13:20Z
METADATA = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")

V1_EVENT: Obj = {
    "apiVersion": "events.k8s.io/v1",
    "kind": "Event",
    "metadata": {"name": "gpu-b-01.drained", "namespace": "default", "labels": {"app": "upgrader"}},
    "eventTime": "2023-11-14T22:13:20.000000Z",
    "reportingController": "example.com/gpu-driver-upgrader",
    "reportingInstance": "upgrader-0",
    "action": "Drain",
    "reason": "GPUDriverUpgrade",
    "regarding": {"apiVersion": "v1", "kind": "Node", "name": "gpu-b-01", "uid": "uid-b"},
    "related": {"apiVersion": "v1", "kind": "Pod", "name": "triton-1", "namespace": "inference"},
    "note": "drained for the driver upgrade",
    "type": "Warning",
}


def call(
    cluster: EmulatedCluster, method: str, path: str, query: str = "", body: Any = None, **headers: str
) -> Response:
    raw = b"" if body is None else json.dumps(body).encode()
    content_type = headers.pop("content_type", "application/json")
    return cluster.dispatcher.handle(Request(method, path, query, {"content-type": content_type, **headers}, raw))


def answer(cluster: EmulatedCluster, method: str, path: str, query: str = "", body: Any = None, **headers: str) -> Obj:
    response = call(cluster, method, path, query, body, **headers)
    assert response.status in (200, 201), (response.status, response.body)
    out: Obj = json.loads(response.body)
    return out


def record_node_events(cluster: EmulatedCluster) -> list[Event]:
    """The controller's own recorder writes core/v1 Events, as it does in a rollout."""
    recorder = EventRecorder(KubeApi(cluster.client(), sleep=lambda _: None), Settings(identity="upgrader-0"))
    events = [Event("gpu-a-01", "Warning", "rollout halted: gpu-a-01 blocked"), Event("gpu-a-02", "Normal", "cordoned")]
    for event in events:
        recorder.record(event, f"uid-{event.node}", NOW)
    recorder.record(events[0], "uid-gpu-a-01", NOW + 60)  # counted on: count 2
    return events


@pytest.fixture
def events_v1(api_client: k8s.ApiClient) -> k8s.EventsV1Api:
    return k8s.EventsV1Api(api_client)


# ----- a core Event, seen through events.k8s.io/v1 --------------------------------------------


def test_a_core_event_is_served_by_events_k8s_io_with_its_fields_renamed(cluster: EmulatedCluster) -> None:
    halted, _ = record_node_events(cluster)
    name = event_name(halted)
    core = answer(cluster, "GET", f"{CORE}/namespaces/default/events/{name}")
    view = answer(cluster, "GET", f"{V1}/namespaces/default/events/{name}")

    assert view == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": core["metadata"],
        "eventTime": "2023-11-14T22:13:20.000000Z",
        "reportingController": "gpu-driver-upgrader",
        "reportingInstance": "upgrader-0",
        "action": "Upgrade",
        "reason": "GPUDriverUpgrade",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": "gpu-a-01", "uid": "uid-gpu-a-01"},
        "note": "rollout halted: gpu-a-01 blocked",
        "type": "Warning",
        "deprecatedSource": {"component": "gpu-driver-upgrader"},
        "deprecatedFirstTimestamp": "2023-11-14T22:13:20Z",
        "deprecatedLastTimestamp": "2023-11-14T22:14:20Z",
        "deprecatedCount": 2,
    }
    assert view["metadata"]["uid"] == core["metadata"]["uid"] != ""
    assert core["metadata"]["resourceVersion"] == view["metadata"]["resourceVersion"]


def test_both_groups_list_the_same_events_in_every_namespace_and_in_one(cluster: EmulatedCluster) -> None:
    record_node_events(cluster)
    cluster.create("namespaces", {"metadata": {"name": "gpu-operator"}})
    cluster.create(
        "events",
        {
            "metadata": {"name": "ds.rolled"},
            "involvedObject": {"kind": "DaemonSet", "name": "ds", "namespace": "gpu-operator"},
            "message": "rolled",
        },
        "gpu-operator",
    )
    for scope in ("", "/namespaces/default", "/namespaces/gpu-operator"):
        core = answer(cluster, "GET", f"{CORE}{scope}/events")
        view = answer(cluster, "GET", f"{V1}{scope}/events")
        assert (view["kind"], view["apiVersion"]) == ("EventList", "events.k8s.io/v1")
        assert view["metadata"]["resourceVersion"] == core["metadata"]["resourceVersion"]
        assert [_identity(e) for e in view["items"]] == [_identity(e) for e in core["items"]]
        assert [(e["regarding"], e["note"]) for e in view["items"]] == [
            (e["involvedObject"], e["message"]) for e in core["items"]
        ]
    everywhere = answer(cluster, "GET", f"{V1}/events")["items"]
    assert [e["metadata"]["namespace"] for e in everywhere] == ["default", "default", "gpu-operator"]


def test_the_official_client_reads_the_view_as_events_v1_models(
    cluster: EmulatedCluster, events_v1: k8s.EventsV1Api
) -> None:
    halted, cordoned = record_node_events(cluster)
    items = events_v1.list_event_for_all_namespaces().items
    assert all(isinstance(e, k8s.EventsV1Event) for e in items)
    by_name = {e.metadata.name: e for e in items}
    assert set(by_name) == {event_name(halted), event_name(cordoned)}
    got = by_name[event_name(halted)]
    assert (got.regarding.name, got.note, got.deprecated_count, got.reporting_controller) == (
        "gpu-a-01",
        "rollout halted: gpu-a-01 blocked",
        2,
        "gpu-driver-upgrader",
    )
    one = events_v1.read_namespaced_event(event_name(cordoned), "default")
    assert (one.note, one.type, one.regarding.uid) == ("cordoned", "Normal", "uid-gpu-a-02")


# ----- an events.k8s.io/v1 Event, seen through core/v1 ---------------------------------------


def test_an_event_created_through_events_k8s_io_is_one_core_event(cluster: EmulatedCluster) -> None:
    created = answer(cluster, "POST", f"{V1}/namespaces/default/events", body=V1_EVENT)
    core = answer(cluster, "GET", f"{CORE}/namespaces/default/events/gpu-b-01.drained")
    view = answer(cluster, "GET", f"{V1}/namespaces/default/events/gpu-b-01.drained")

    assert created == view
    assert {k: created["metadata"][k] for k in METADATA} == {k: core["metadata"][k] for k in METADATA}
    assert core == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": created["metadata"],
        "involvedObject": V1_EVENT["regarding"],
        "reason": "GPUDriverUpgrade",
        "message": "drained for the driver upgrade",
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "type": "Warning",
        "eventTime": "2023-11-14T22:13:20.000000Z",
        "action": "Drain",
        "related": V1_EVENT["related"],
        "reportingComponent": "example.com/gpu-driver-upgrader",
        "reportingInstance": "upgrader-0",
    }
    # The view answers what was written, plus what the server sets and Go's zero values.
    written = {k: v for k, v in V1_EVENT.items() if k != "metadata"}
    assert {k: v for k, v in created.items() if k in written} == written
    assert (created["deprecatedSource"], created["deprecatedFirstTimestamp"], created["deprecatedLastTimestamp"]) == (
        {},
        None,
        None,
    )
    assert "deprecatedCount" not in created


def test_the_official_client_creates_through_either_group_and_reads_through_the_other(
    core: k8s.CoreV1Api, events_v1: k8s.EventsV1Api
) -> None:
    made = events_v1.create_namespaced_event("default", V1_EVENT)
    seen = core.read_namespaced_event("gpu-b-01.drained", "default")
    assert isinstance(seen, k8s.CoreV1Event)
    assert (seen.metadata.uid, seen.metadata.resource_version) == (made.metadata.uid, made.metadata.resource_version)
    assert (seen.involved_object.name, seen.message, seen.reporting_component) == (
        "gpu-b-01",
        "drained for the driver upgrade",
        "example.com/gpu-driver-upgrader",
    )

    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "pod.pulled"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "message": "pulled",
            "reason": "Pulled",
            "eventTime": "2023-11-14T22:13:20.000000Z",
            "action": "Pull",
            "reportingComponent": "kubelet",
            "reportingInstance": "node-1",
        },
    )
    pulled = events_v1.read_namespaced_event("pod.pulled", "default")
    assert (pulled.regarding.kind, pulled.regarding.name, pulled.note) == ("Pod", "p", "pulled")


def test_the_view_carries_only_fields_of_the_kubernetes_schema(cluster: EmulatedCluster) -> None:
    """Checked against the official client's models, generated from Kubernetes' OpenAPI schema."""
    record_node_events(cluster)
    answer(cluster, "POST", f"{V1}/namespaces/default/events", body=V1_EVENT)
    v1_fields = set(k8s.EventsV1Event.attribute_map.values())
    core_fields = set(k8s.CoreV1Event.attribute_map.values())
    views = answer(cluster, "GET", f"{V1}/events")["items"]
    cores = answer(cluster, "GET", f"{CORE}/events")["items"]
    assert len(views) == len(cores) == 3
    for view, core in zip(views, cores, strict=True):
        assert set(view) <= v1_fields, set(view) - v1_fields
        assert set(core) <= core_fields, set(core) - core_fields
        k8s.EventsV1Event.from_dict(view)  # the schema's required fields (eventTime) are there
        k8s.CoreV1Event.from_dict(core)


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


def test_tables_are_the_same_in_both_groups(cluster: EmulatedCluster) -> None:
    record_node_events(cluster)
    answer(cluster, "POST", f"{V1}/namespaces/default/events", body=V1_EVENT)
    table = "application/json;as=Table;v=v1;g=meta.k8s.io"
    core = answer(cluster, "GET", f"{CORE}/events", accept=table)
    view = answer(cluster, "GET", f"{V1}/events", accept=table)
    assert [r["cells"] for r in view["rows"]] == [r["cells"] for r in core["rows"]]
    assert [r["cells"][1:] for r in view["rows"]] == [
        ["Warning", "GPUDriverUpgrade", "node/gpu-a-01", "rollout halted: gpu-a-01 blocked"],
        ["Normal", "GPUDriverUpgrade", "node/gpu-a-02", "cordoned"],
        ["Warning", "GPUDriverUpgrade", "node/gpu-b-01", "drained for the driver upgrade"],
    ]
    with_objects = answer(cluster, "GET", f"{V1}/events", "includeObject=Object", accept=table)
    assert {r["object"]["apiVersion"] for r in with_objects["rows"]} == {"events.k8s.io/v1"}


def test_a_loaded_events_k8s_io_event_is_served_in_both_groups(cluster: EmulatedCluster) -> None:
    loaded = {**V1_EVENT, "metadata": {**V1_EVENT["metadata"], "uid": "uid-loaded"}}
    assert cluster.load([loaded]) == 1
    core = answer(cluster, "GET", f"{CORE}/namespaces/default/events/gpu-b-01.drained")
    view = answer(cluster, "GET", f"{V1}/namespaces/default/events/gpu-b-01.drained")
    assert core["metadata"]["uid"] == view["metadata"]["uid"] == "uid-loaded"
    assert (core["message"], view["note"]) == (V1_EVENT["note"], V1_EVENT["note"])


def test_discovery_advertises_events_in_both_groups(cluster: EmulatedCluster) -> None:
    groups = answer(cluster, "GET", "/apis")["groups"]
    (events_group,) = [g for g in groups if g["name"] == "events.k8s.io"]
    assert events_group["preferredVersion"] == {"groupVersion": "events.k8s.io/v1", "version": "v1"}
    for path in (CORE, V1):
        (resource,) = [r for r in answer(cluster, "GET", path)["resources"] if r["name"] == "events"]
        assert (resource["kind"], resource["namespaced"], resource["shortNames"]) == ("Event", True, ["ev"])
        assert {"create", "get", "list", "watch", "delete"} <= set(resource["verbs"])


# ----- the real kubectl ------------------------------------------------------------------------

CORE_MANIFEST = """\
apiVersion: v1
kind: Event
metadata: {name: gpu-a-01.cordoned, namespace: default}
involvedObject: {apiVersion: v1, kind: Node, name: gpu-a-01, uid: uid-a}
reason: GPUDriverUpgrade
message: cordoned for the driver upgrade
type: Normal
source: {component: gpu-driver-upgrader}
firstTimestamp: "2023-11-14T22:13:20Z"
lastTimestamp: "2023-11-14T22:13:20Z"
count: 1
reportingComponent: gpu-driver-upgrader
reportingInstance: upgrader-0
"""


class Kubectl:
    """The real kubectl against a served emulator (its own discovery cache), and that emulator."""

    def __init__(self, binary: str, cluster: EmulatedCluster, kubeconfig: Path, cache: Path) -> None:
        self.cluster = cluster
        self.base = [binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache)]
        self.env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *args], input=stdin, capture_output=True, text=True, timeout=30, env=self.env
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.base, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        assert result.returncode == 0 and result.stderr == "", (args, result.stdout, result.stderr)
        return result.stdout

    def items(self, *args: str) -> list[Obj]:
        items: list[Obj] = json.loads(self.ok("get", *args, "-o", "json"))["items"]
        return items


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Kubectl]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl not installed (not on PATH)")
    cluster = EmulatedCluster()
    cluster.serve()
    try:
        yield Kubectl(binary, cluster, cluster.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path / "cache")
    finally:
        cluster.stop()


def _rows(text: str) -> list[list[str]]:
    """kubectl's event rows (header left out): namespace, last seen, type, reason, object, message."""
    return [line.split(None, 5) for line in text.splitlines()[1:]]


@pytest.mark.kubectl
def test_kubectl_shows_the_same_events_in_both_groups(kubectl: Kubectl) -> None:
    # No OpenAPI documents are served, so kubectl's client-side validation is off.
    created = kubectl.ok("create", "--validate=false", "-f", "-", stdin=CORE_MANIFEST)
    assert created == "event/gpu-a-01.cordoned created\n"
    assert (
        kubectl.ok("create", "--validate=false", "-f", "-", stdin=json.dumps(V1_EVENT))
        == "event.events.k8s.io/gpu-b-01.drained created\n"
    )

    core_table = kubectl.ok("get", "events", "-A")
    assert kubectl.ok("get", "events.v1.events.k8s.io", "-A") == core_table
    assert core_table.splitlines()[0].split() == ["NAMESPACE", "LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [(r[0], r[2], r[3], r[4], r[5]) for r in _rows(core_table)] == [
        ("default", "Normal", "GPUDriverUpgrade", "node/gpu-a-01", "cordoned for the driver upgrade"),
        ("default", "Warning", "GPUDriverUpgrade", "node/gpu-b-01", "drained for the driver upgrade"),
    ]

    core = kubectl.items("events", "-A")
    view = kubectl.items("events.v1.events.k8s.io", "-A")
    assert [_identity(e) for e in view] == [_identity(e) for e in core]
    assert [e["metadata"]["name"] for e in view] == ["gpu-a-01.cordoned", "gpu-b-01.drained"]
    for v1, c in zip(view, core, strict=True):
        assert v1["apiVersion"] == "events.k8s.io/v1" and c["apiVersion"] == "v1"
        assert (v1["regarding"], v1["note"], v1["reason"], v1["type"]) == (
            c["involvedObject"],
            c["message"],
            c["reason"],
            c["type"],
        )
    assert view[0]["deprecatedCount"] == 1 and view[0]["deprecatedSource"] == {"component": "gpu-driver-upgrader"}

    through_v1 = kubectl.items("events", "-n", "default", "--field-selector", "metadata.name=gpu-b-01.drained")
    assert [(e["involvedObject"]["name"], e["message"], e["reportingComponent"]) for e in through_v1] == [
        ("gpu-b-01", "drained for the driver upgrade", "example.com/gpu-driver-upgrader")
    ]


@pytest.mark.kubectl
def test_kubectl_selects_deletes_and_discovers_events_k8s_io(kubectl: Kubectl) -> None:
    kubectl.ok("create", "--validate=false", "-f", "-", stdin=CORE_MANIFEST)
    kubectl.ok("create", "--validate=false", "-f", "-", stdin=json.dumps(V1_EVENT))

    names = kubectl.ok("get", "events.events.k8s.io", "-A", "--field-selector", "regarding.name=gpu-b-01", "-o", "name")
    assert names == "event.events.k8s.io/gpu-b-01.drained\n"
    refused = kubectl.run("get", "events.events.k8s.io", "-A", "--field-selector", "involvedObject.name=gpu-b-01")
    assert refused.returncode == 1 and "field label not supported: involvedObject.name" in refused.stderr
    note = kubectl.ok("get", "events.events.k8s.io", "-n", "default", "gpu-a-01.cordoned", "-o", "jsonpath={.note}")
    assert note == "cordoned for the driver upgrade"

    resources = [line.split() for line in kubectl.ok("api-resources").splitlines()]
    assert ["events", "ev", "v1", "true", "Event"] in resources
    assert ["events", "ev", "events.k8s.io/v1", "true", "Event"] in resources

    deleted = kubectl.ok("delete", "events.events.k8s.io", "-n", "default", "gpu-a-01.cordoned")
    assert deleted == 'event.events.k8s.io "gpu-a-01.cordoned" deleted\n'
    assert kubectl.ok("get", "events", "-A", "-o", "name") == "event/gpu-b-01.drained\n"


@pytest.mark.kubectl
def test_kubectl_watch_of_events_k8s_io_sees_a_core_event_created(kubectl: Kubectl) -> None:
    watch = kubectl.start(
        "get", "events.v1.events.k8s.io", "-A", "-w", "--output-watch-events", "-o", "json", "--request-timeout=4s"
    )
    try:
        deadline = time.monotonic() + 10
        while not any(r.verb == "watch" and r.resource == "events" for r in kubectl.cluster.requests):
            assert time.monotonic() < deadline and watch.poll() is None, "kubectl never started its watch"
            time.sleep(0.05)
        kubectl.ok("create", "--validate=false", "-f", "-", stdin=CORE_MANIFEST)
        out, err = watch.communicate(timeout=15)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, err
    (added,) = _json_documents(out)
    assert added["type"] == "ADDED"
    event = added["object"]
    assert (event["apiVersion"], event["metadata"]["name"]) == ("events.k8s.io/v1", "gpu-a-01.cordoned")
    assert (event["regarding"]["name"], event["note"]) == ("gpu-a-01", "cordoned for the driver upgrade")
    (stored,) = kubectl.items("events", "-A")
    assert _identity(stored) == _identity(event)


def _json_documents(text: str) -> list[Obj]:
    """The JSON objects kubectl printed one after another."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
    return docs


def _identity(event: Obj) -> tuple[str, ...]:
    return tuple(str(event["metadata"][k]) for k in METADATA)
