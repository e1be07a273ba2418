"""An API server that comes back older (restored from an earlier etcd backup), in process on a
virtual clock: objects and resourceVersions go back, every watch ends, a watch resumed from a
version the server has not reached gets what kube-apiserver answers, and the cluster's behaviours
carry on from the restored objects."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import is_ready, names, node_body, pod_body, rv, status_of, watch_events
from tests.sim.conftest import Served
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.informer import Informer
from upgrader.sim.apiserver.api import Request
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import JOB_RUN_SECONDS
from upgrader.sim.fleets.scenarios import build

MERGE = "application/merge-patch+json"


def label(cluster: EmulatedCluster, node: str, value: str) -> None:
    cluster.store.patch(cluster.type("nodes"), None, node, MERGE, {"metadata": {"labels": {"x": value}}})


def nodes_after_restore(cluster: EmulatedCluster, core: k8s.CoreV1Api, **restore: object) -> int:
    """n1, n2 backed up; then n1 relabelled, n2 deleted, n3 created; then the restore. Returns the
    resourceVersion clients had seen last before it."""
    core.create_node(node_body("n1", {"x": "before"}))
    core.create_node(node_body("n2"))
    backup = cluster.backup()
    label(cluster, "n1", "after")
    core.delete_node("n2")
    core.create_node(node_body("n3"))
    seen = int(core.list_node().metadata.resource_version)
    cluster.restore_from(backup, **restore)  # type: ignore[arg-type]
    return seen


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


# ----- watches -------------------------------------------------------------------------------


def test_every_open_watch_ends_and_loses_what_it_had_not_sent(cluster: EmulatedCluster) -> None:
    cluster.create("nodes", node_body("n1"))
    backup = cluster.backup()
    watcher = cluster.store.watch(cluster.type("nodes"), resource_version=str(backup.resource_version))
    label(cluster, "n1", "after")  # queued, not yet sent
    cluster.restore_from(backup)
    assert watcher.closed and watcher.drain() == []
    label(cluster, "n1", "later")
    assert watcher.drain() == [], "a closed watch gets nothing more"


def test_a_watch_from_before_the_restored_version_is_410_gone(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
    core.create_node(node_body("n1"))
    early = core.list_node().metadata.resource_version
    core.create_node(node_body("n2"))
    backup = cluster.backup()
    cluster.restore_from(backup)
    events = cluster.store.watch(cluster.type("nodes"), resource_version=early).drain()
    assert [(t, o["code"], o["reason"], o["message"]) for t, o in events] == [
        ("ERROR", 410, "Expired", f"too old resource version: {early} ({backup.resource_version})")
    ]
    assert [t for t, _ in watch_events(core.list_node, resource_version=str(backup.resource_version))] == []


def test_by_default_a_watch_from_a_newer_version_is_held_until_the_store_passes_it(
    cluster: EmulatedCluster, core: k8s.CoreV1Api
) -> None:
    """What kube-apiserver's watch cache does: no error, and nothing until that version is passed,
    so changes in between are never sent (kubernetes/kubernetes#107457)."""
    seen = nodes_after_restore(cluster, core)
    restored = cluster.store.resource_version
    assert watch_events(core.list_node, resource_version=str(seen)) == []
    watcher = cluster.store.watch(cluster.type("nodes"), resource_version=str(seen))
    for i in range(seen - restored + 2):
        label(cluster, "n2", str(i))
    sent = watcher.drain()
    assert [int(o["metadata"]["resourceVersion"]) for _, o in sent] == [seen + 1, seen + 2]


def test_a_watch_from_a_newer_version_can_be_answered_410_gone(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
    seen = nodes_after_restore(cluster, core, future_watches="gone")
    events = cluster.store.watch(cluster.type("nodes"), resource_version=str(seen)).drain()
    assert [(t, o["code"], o["reason"]) for t, o in events] == [("ERROR", 410, "Expired")]


def test_a_watch_from_a_newer_version_can_be_answered_too_large(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
    seen = nodes_after_restore(cluster, core, future_watches="too-large")
    restored = cluster.store.resource_version
    ((kind, status),) = cluster.store.watch(cluster.type("nodes"), resource_version=str(seen)).drain()
    assert kind == "ERROR"
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Timeout: Too large resource version: {seen}, current: {restored}",
        "reason": "Timeout",
        "details": {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        "code": 504,
    }


def test_an_unknown_answer_for_newer_watches_is_refused(cluster: EmulatedCluster) -> None:
    with pytest.raises(ValueError, match="wait"):
        cluster.restore_from(cluster.backup(), future_watches="ignore")


def test_a_list_or_get_at_a_version_not_reached_is_504_too_large(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
    seen = nodes_after_restore(cluster, core)
    restored = cluster.store.resource_version
    with pytest.raises(ApiException) as listed:
        core.list_node(resource_version=str(seen))
    assert listed.value.status == 504 and listed.value.headers["Retry-After"] == "1"
    assert status_of(listed.value)["message"] == f"Timeout: Too large resource version: {seen}, current: {restored}"
    got = cluster.dispatcher.handle(Request("GET", "/api/v1/nodes/n1", f"resourceVersion={seen}"))
    assert got.status == 504
    assert names(core.list_node(resource_version=str(restored)).items) == ["n1", "n2"]
    assert names(core.list_node(resource_version="0").items) == ["n1", "n2"]


# ----- the watch-fed copy (upgrader/kube/informer.py) ------------------------------------------


@pytest.mark.parametrize("answer", ["gone", "too-large"])
def test_an_informer_told_of_the_restore_lists_again_and_holds_what_is_served(
    cluster: EmulatedCluster, answer: str
) -> None:
    build(cluster, "healthy")
    informer = Informer(KubeApi(cluster.client(), sleep=lambda _: None), "/api/v1/nodes", lambda n: n)
    informer.step()
    backup = cluster.backup()
    label(cluster, "gpu-a-01", "after")
    informer.step()
    cluster.restore_from(backup, future_watches=answer)
    with pytest.raises(ApiError) as lost:
        informer.step()
    assert lost.value.status == {"gone": 410, "too-large": 504}[answer]
    assert informer.entries() is None, "unsynced: passes list until it has listed again"
    informer.step()
    entries = informer.entries()
    assert entries is not None and int(informer.version) == backup.resource_version
    assert "x" not in entries["gpu-a-01"].view["metadata"]["labels"]


def test_an_informer_held_by_kube_apiserver_keeps_its_newer_copy_until_a_list_resets_it(
    cluster: EmulatedCluster,
) -> None:
    """The hazard the controller must meet: its watch neither fails nor delivers, so only a LIST
    (a pass after a refused write) shows it the restored objects."""
    build(cluster, "healthy")
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    informer = Informer(api, "/api/v1/nodes", lambda n: n)
    informer.step()
    backup = cluster.backup()
    for value in ("one", "two", "after"):
        label(cluster, "gpu-a-01", value)
    informer.step()
    cluster.restore_from(backup)
    label(cluster, "gpu-b-01", "restored")  # fewer writes than before the restore: the version is lower
    informer.step()
    entries = informer.entries()
    assert entries is not None and entries["gpu-a-01"].view["metadata"]["labels"]["x"] == "after"
    assert "x" not in entries["gpu-b-01"].view["metadata"]["labels"], "the change after the restore was not sent"
    informer.absorb(api.list("/api/v1/nodes"))
    entries = informer.entries()
    assert entries is not None and int(informer.version) == backup.resource_version + 1
    assert "x" not in entries["gpu-a-01"].view["metadata"]["labels"]
    assert entries["gpu-b-01"].view["metadata"]["labels"]["x"] == "restored"


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


# ----- over HTTP: the official client's informer loop, and kubectl ---------------------------


def test_over_http_the_informer_loop_sees_its_watch_end_and_relists(served: Served) -> None:
    cluster = served.cluster
    cluster.create("nodes", node_body("n1", {"x": "before"}))
    api = KubeApi(served.api_client(), sleep=lambda _: None)
    informer = Informer(api, "/api/v1/nodes", lambda n: n, timeout_seconds=30)
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        backup = cluster.backup()
        label(cluster, "n1", "one")
        label(cluster, "n1", "after")
        wait_for(lambda: informer.version == str(backup.resource_version + 2))
        cluster.restore_from(backup, future_watches="gone")  # the open watch ends; its resumption is 410
        wait_for(lambda: informer.version == str(backup.resource_version))
        entries = informer.entries()
        assert entries is not None and entries["n1"].view["metadata"]["labels"] == {"x": "before"}
    finally:
        stop.set()
        label(cluster, "n1", "wake")  # an event ends the stream the loop is reading
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_kubectl_watching_sees_the_stream_end_and_then_the_restored_objects(served: Served, tmp_path: Path) -> None:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl not installed (not on PATH)")
    cluster = served.cluster
    cluster.create("nodes", node_body("n1", {"x": "before"}))
    backup = cluster.backup()
    label(cluster, "n1", "after")
    kubeconfig = str(cluster.write_kubeconfig(tmp_path / "kubeconfig"))
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    kubectl = [binary, "--kubeconfig", kubeconfig]
    watch = subprocess.Popen([*kubectl, "get", "nodes", "-w", "-L", "x"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert watch.stdout is not None
        assert watch.stdout.readline().split()[-1] == "X"
        assert watch.stdout.readline().split()[-1] == "after"
        cluster.restore_from(backup, future_watches="too-large")
        assert watch.wait(timeout=10) == 0, "kubectl's watch ended with the server's"
    finally:
        if watch.poll() is None:
            watch.kill()
        watch.wait()
    shown = subprocess.run([*kubectl, "get", "nodes", "-L", "x"], capture_output=True, text=True, env=env, timeout=30)
    assert shown.stdout.splitlines()[1].split()[-1] == "before"
    ahead = str(cluster.store.resource_version + 1)  # a version the restored server has not reached
    raw = subprocess.run(
        [*kubectl, "get", "--raw", f"/api/v1/nodes?watch=true&resourceVersion={ahead}"],
        capture_output=True, text=True, env=env, check=True, timeout=30,
    )
    event = json.loads(raw.stdout)
    assert (event["type"], event["object"]["code"], event["object"]["reason"]) == ("ERROR", 504, "Timeout")


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
