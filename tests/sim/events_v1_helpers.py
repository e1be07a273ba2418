"""Shared by the events.k8s.io/v1 tests: the paths of both groups, an events.k8s.io/v1 Event body,
raw requests to the emulator, the controller's recorder writing core Events, and an Event's identity."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s

from upgrader.controller.settings import Settings
from upgrader.core.model.actions import Event
from upgrader.kube.api import KubeApi
from upgrader.kube.events import EventRecorder
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


def _identity(event: Obj) -> tuple[str, ...]:
    return tuple(str(event["metadata"][k]) for k in METADATA)
