"""Watches across an API server restored from an earlier etcd backup: every open watch ends, a
watch resumed from a version the server has not reached gets what kube-apiserver answers, and the
watch-fed informer, the official client's informer loop over HTTP and kubectl all see the restored
objects."""

from __future__ import annotations

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

from tests.sim.builders import names, node_body, status_of, watch_events
from tests.sim.conftest import Served
from tests.sim.restore_helpers import label, nodes_after_restore
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.informer import Informer
from upgrader.sim.apiserver.api import Request
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

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
