"""events.k8s.io/v1 Events through the real kubectl against a served emulator: both groups show the
same events, kubectl selects, deletes and discovers through events.k8s.io, and its watch of that group
sees a core Event created."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sim.events_v1_helpers import V1_EVENT, Obj, _identity
from upgrader.sim.cluster import EmulatedCluster

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
