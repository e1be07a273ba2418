"""Node Events are aggregated as client-go aggregates them: the same words on the same node are one
Event whose count goes up, across passes, controller restarts and Event expiry; judged by what the
emulator's API server holds and the requests it saw."""

from __future__ import annotations

from upgrader.controller.settings import Settings
from upgrader.core.model.actions import Event
from upgrader.kube.api import KubeApi
from upgrader.kube.events import EventRecorder, event_name
from upgrader.sim.cluster import EmulatedCluster

SETTINGS = Settings(identity="events-test")


def _events(cluster: EmulatedCluster) -> list[dict]:
    return sorted(cluster.store.objects(cluster.type("events")), key=lambda e: e["message"])


def _recorder(cluster: EmulatedCluster) -> EventRecorder:
    return EventRecorder(KubeApi(cluster.client(), sleep=lambda _: None), SETTINGS)


def test_a_repeated_event_is_counted_not_created_again() -> None:
    cluster = EmulatedCluster.virtual()
    recorder = _recorder(cluster)
    halted = Event("gpu-a-01", "Warning", "rollout halted: gpu-a-01 blocked")
    recorder.record(halted, "uid-1", 1_700_000_000)
    recorder.record(halted, "uid-1", 1_700_000_060)
    recorder.record(Event("gpu-a-01", "Normal", "no longer blocked in pod-deletion-required"), "uid-1", 1_700_000_090)
    (unblocked, halt) = _events(cluster)
    assert (halt["count"], halt["firstTimestamp"], halt["lastTimestamp"]) == (
        2,
        "2023-11-14T22:13:20Z",
        "2023-11-14T22:14:20Z",
    )
    assert halt["reason"] == "GPUDriverUpgrade" and halt["involvedObject"]["name"] == "gpu-a-01"
    assert unblocked["count"] == 1
    verbs = [(r.verb, r.resource) for r in cluster.requests if r.resource == "events"]
    assert verbs == [("create", "events"), ("patch", "events"), ("create", "events")]


def test_a_restarted_controller_counts_on_from_what_the_cluster_holds() -> None:
    cluster = EmulatedCluster.virtual()
    event = Event("gpu-a-01", "Warning", "upgrade failed in validation-required: ...")
    _recorder(cluster).record(event, "uid-1", 1_700_000_000)
    _recorder(cluster).record(event, "uid-1", 1_700_000_100)  # a new process: it knows no count
    (stored,) = _events(cluster)
    assert stored["count"] == 2
    assert stored["metadata"]["name"] == event_name(event)


def test_an_expired_event_is_created_anew() -> None:
    cluster = EmulatedCluster.virtual()
    recorder = _recorder(cluster)
    event = Event("gpu-a-01", "Normal", "Successfully drained the node")
    recorder.record(event, "uid-1", 1_700_000_000)
    cluster.store.remove(cluster.type("events"), _events(cluster)[0])  # the API server's TTL ran out
    recorder.record(event, "uid-1", 1_700_003_700)
    (stored,) = _events(cluster)
    assert (stored["count"], stored["firstTimestamp"]) == (1, "2023-11-14T23:15:00Z")


def test_names_differ_by_node_type_and_words() -> None:
    names = {
        event_name(Event("a", "Normal", "x")),
        event_name(Event("b", "Normal", "x")),
        event_name(Event("a", "Warning", "x")),
        event_name(Event("a", "Normal", "y")),
    }
    assert len(names) == 4
    assert event_name(Event("n" * 300, "Normal", "x")).startswith("n" * 200 + ".")
