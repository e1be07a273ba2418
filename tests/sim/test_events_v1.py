"""events.k8s.io/v1 Events are the core/v1 Events the emulator stores, in a second view.

As on kube-apiserver, one stored Event is served in both groups: created through either, it has
one name, uid and resourceVersion, and each group shows it with its own field names (`regarding`
and `note` here, `involvedObject` and `message` there). In process on a virtual clock (raw requests
for exact answers, the official client for its models, which are generated from Kubernetes' OpenAPI
for exact answers, the official client for its models, which are generated from Kubernetes' OpenAPI
schema). Selectors, watches and writes are in test_events_v1_writes.py, the real kubectl in
test_events_v1_kubectl.py.
"""

from __future__ import annotations

from kubernetes import client as k8s

from tests.sim.events_v1_helpers import CORE, METADATA, V1, V1_EVENT, _identity, answer, record_node_events
from tests.sim.events_v1_helpers import events_v1 as events_v1
from upgrader.kube.events import event_name
from upgrader.sim.cluster import EmulatedCluster

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


# ----- tables, loading, discovery -------------------------------------------------------------


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
