"""Injected API faults as the official client sees them, the request log, and the audit log."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import node_body, status_of
from tests.sim.conftest import Served
from upgrader.sim.apiserver.faults import FaultPlan, FaultRates
from upgrader.sim.cluster import EmulatedCluster

Call = Callable[[k8s.CoreV1Api], Any]

CALLS: dict[str, Call] = {
    "list": lambda core: core.list_node(),
    "get": lambda core: core.read_node("n1"),
    "patch": lambda core: core.patch_node("n1", {"metadata": {"labels": {"touched": "yes"}}}),
    "create": lambda core: core.create_node(node_body("n2")),
    "delete": lambda core: core.delete_node("n1"),
}


@pytest.fixture(autouse=True)
def node(core: k8s.CoreV1Api) -> None:
    core.create_node(node_body("n1"))


def unchanged(core: k8s.CoreV1Api) -> None:
    """No faulted write landed: n1 is as created and n2 does not exist."""
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    assert core.read_node("n1").metadata.labels == {}


@pytest.mark.parametrize("verb", list(CALLS))
def test_injected_500(cluster: EmulatedCluster, core: k8s.CoreV1Api, verb: str) -> None:
    cluster.faults = FaultPlan({verb: FaultRates(error500=1.0)})
    with pytest.raises(ApiException) as err:
        CALLS[verb](core)
    assert (err.value.status, err.value.reason) == (500, "Internal Server Error")
    assert status_of(err.value)["reason"] == "InternalError"
    assert cluster.requests[-1].status == 500
    cluster.faults = None
    unchanged(core)


def test_injected_429_carries_retry_after(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
    cluster.faults = FaultPlan({"get": FaultRates(throttle429=1.0, retry_after=7)})
    with pytest.raises(ApiException) as err:
        core.read_node("n1")
    assert (err.value.status, err.value.reason) == (429, "Too Many Requests")
    assert err.value.headers["Retry-After"] == "7"
    body = status_of(err.value)
    assert body["reason"] == "TooManyRequests"
    assert body["details"]["retryAfterSeconds"] == 7


@pytest.mark.parametrize("verb", ["patch", "delete"])
def test_injected_409(cluster: EmulatedCluster, core: k8s.CoreV1Api, verb: str) -> None:
    cluster.faults = FaultPlan({verb: FaultRates(conflict409=1.0)})
    with pytest.raises(ApiException) as err:
        CALLS[verb](core)
    assert (err.value.status, err.value.reason) == (409, "Conflict")
    body = status_of(err.value)
    assert body["reason"] == "Conflict"
    assert body["message"].startswith(
        'Operation cannot be fulfilled on nodes "n1": the object has been modified'
    )
    cluster.faults = None
    unchanged(core)


@pytest.mark.parametrize("verb", list(CALLS))
def test_injected_drop_raises_a_protocol_error_in_process(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, verb: str
) -> None:
    cluster.faults = FaultPlan({verb: FaultRates(drop=1.0)})
    with pytest.raises(urllib3.exceptions.ProtocolError):
        CALLS[verb](core)
    record = cluster.requests[-1]
    assert (record.verb, record.fault, record.status) == (verb, "drop", 0)
    cluster.faults = None
    unchanged(core)


@pytest.mark.parametrize("kind", ["drop", "error500", "throttle429", "conflict409"])
def test_the_request_log_names_the_injected_fault(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, kind: str
) -> None:
    cluster.faults = FaultPlan({"get": FaultRates(**{kind: 1.0})})
    with pytest.raises((ApiException, urllib3.exceptions.ProtocolError)):
        core.read_node("n1")
    cluster.faults = None
    core.read_node("n1")
    faulted, clean = cluster.requests[-2:]
    assert (faulted.verb, faulted.fault) == ("get", kind)
    assert (clean.verb, clean.fault, clean.status) == ("get", None, 200)


def test_faults_hit_only_the_verbs_in_the_plan(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
    cluster.faults = FaultPlan({"list": FaultRates(error500=1.0)})
    with pytest.raises(ApiException):
        core.list_node()
    assert core.read_node("n1").metadata.name == "n1"
    assert core.patch_node("n1", {"metadata": {"labels": {"ok": "1"}}}).metadata.labels == {"ok": "1"}


def outcomes(plan: FaultPlan, calls: int = 40) -> list[str]:
    cluster = EmulatedCluster.virtual(faults=plan)
    cluster.create("nodes", node_body("n1"))
    core = k8s.CoreV1Api(cluster.client())
    seen = []
    for _ in range(calls):
        try:
            core.read_node("n1")
            seen.append("200")
        except ApiException as exc:
            seen.append(str(exc.status))
        except urllib3.exceptions.ProtocolError:
            seen.append("drop")
    assert [str(r.status) if r.status else "drop" for r in cluster.requests] == seen
    return seen


def test_fault_draws_are_seeded_and_reproducible() -> None:
    first = outcomes(FaultPlan.uniform(0.6, seed=11, verbs=("get",)))
    again = outcomes(FaultPlan.uniform(0.6, seed=11, verbs=("get",)))
    other = outcomes(FaultPlan.uniform(0.6, seed=12, verbs=("get",)))
    assert first == again
    assert first != other
    assert set(first) == {"200", "500", "429", "409", "drop"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: FaultRates(error500=-0.1),
        lambda: FaultRates(error500=0.6, drop=0.6),
        lambda: FaultRates(latency=-1),
        lambda: FaultPlan({"frobnicate": FaultRates()}),
    ],
    ids=["negative", "over-one", "negative-latency", "unknown-verb"],
)
def test_bad_fault_plans_are_rejected(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        make()


# ----- over HTTP ---------------------------------------------------------------------------


def test_a_dropped_connection_over_http(served: Served) -> None:
    served.core().create_node(node_body("n1"))
    served.cluster.faults = FaultPlan({"get": FaultRates(drop=1.0)})

    with pytest.raises(urllib3.exceptions.ProtocolError):
        served.core(retries=False).read_node("n1")
    assert [(r.verb, r.fault, r.status) for r in served.cluster.requests[-1:]] == [("get", "drop", 0)]

    before = len(served.cluster.requests)
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        served.core().read_node("n1")  # urllib3's default retries meet a drop every time
    retried = served.cluster.requests[before:]
    assert len(retried) == 1 + urllib3.util.Retry.DEFAULT.total
    assert {(r.fault, r.status) for r in retried} == {("drop", 0)}


def test_throttling_over_http_carries_a_retry_after_the_client_honours(served: Served) -> None:
    served.core().create_node(node_body("n1"))
    served.cluster.faults = FaultPlan({"get": FaultRates(throttle429=1.0, retry_after=1)})

    with pytest.raises(ApiException) as err:
        served.core(retries=False).read_node("n1")
    assert (err.value.status, err.value.reason) == (429, "Too Many Requests")
    assert err.value.headers["Retry-After"] == "1"

    before = len(served.cluster.requests)
    with pytest.raises(ApiException) as err:
        served.core(retries=urllib3.util.Retry(total=1)).read_node("n1")
    assert err.value.status == 429  # still throttled after the one retry allowed
    first, retry = served.cluster.requests[before:]
    assert (first.status, retry.status) == (429, 429)
    assert retry.time - first.time >= 1.0  # urllib3 waited as the header said


def test_latency_over_http(served: Served) -> None:
    core = served.core()
    core.create_node(node_body("n1"))
    served.cluster.faults = FaultPlan({"get": FaultRates(latency=0.3)})
    started = time.monotonic()
    assert core.read_node("n1").metadata.name == "n1"
    assert time.monotonic() - started >= 0.3
    assert served.cluster.requests[-1].fault is None  # latency alone is not a fault


# ----- the audit log -------------------------------------------------------------------------


def test_the_audit_log_has_one_json_object_per_request(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with path.open("w", encoding="utf-8") as audit:
        cluster = EmulatedCluster.virtual(audit=audit)
        core = k8s.CoreV1Api(cluster.client())
        core.create_node(node_body("n1"))
        core.patch_node("n1", {"spec": {"unschedulable": True}})
        with pytest.raises(ApiException):
            core.read_node("missing")
        cluster.faults = FaultPlan({"list": FaultRates(drop=1.0)})
        with pytest.raises(urllib3.exceptions.ProtocolError):
            core.list_node()

    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == len(cluster.requests) == 4
    assert [r["seq"] for r in records] == [1, 2, 3, 4]
    assert [(r["verb"], r["method"], r["path"], r["status"], r["fault"]) for r in records] == [
        ("create", "POST", "/api/v1/nodes", 201, None),
        ("patch", "PATCH", "/api/v1/nodes/n1", 200, None),
        ("get", "GET", "/api/v1/nodes/missing", 404, None),
        ("list", "GET", "/api/v1/nodes", 0, "drop"),
    ]
    assert records[1]["body"] == {"spec": {"unschedulable": True}}
    assert records == [json.loads(r.to_json()) for r in cluster.requests]
