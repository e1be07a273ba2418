"""Custom resources as kube-apiserver serves them: deploy/crd.yaml's DriverRollout is the subject.

Schema refusals in apimachinery's words, pruning, strict field validation, strategic merge refused,
the status subresource and metadata.generation, printer-column Tables, the CRD's conditions."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from upgrader.sim.apiserver.api import Request
from upgrader.sim.cluster import EmulatedCluster

CRD = Path(__file__).resolve().parents[2] / "deploy" / "crd.yaml"
BASE = "/apis/gpu-upgrader.io/v1alpha1/driverrollouts"
MERGE, STRATEGIC = "application/merge-patch+json", "application/strategic-merge-patch+json"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


class Server:
    def __init__(self) -> None:
        self.cluster = EmulatedCluster.virtual()
        crds = self.cluster.type("customresourcedefinitions", "apiextensions.k8s.io")
        self.cluster.store.create(crds, None, yaml.safe_load(CRD.read_text()))

    def call(
        self, method: str, path: str, body: Any = None, ctype: str = "application/json", query: str = "",
        accept: str = "application/json",
    ) -> tuple[int, dict[str, Any]]:
        raw = json.dumps(body).encode() if body is not None else b""
        headers = {"content-type": ctype, "accept": accept}
        answer = self.cluster.dispatcher.handle(Request(method, path, query, headers, raw))
        return answer.status, json.loads(answer.body or b"{}")

    def create(self, spec: dict[str, Any], query: str = "") -> tuple[int, dict[str, Any]]:
        body = {"apiVersion": "gpu-upgrader.io/v1alpha1", "kind": "DriverRollout", "metadata": {"name": "default"},
                "spec": spec}
        return self.call("POST", BASE, body, query=query)


@pytest.fixture
def server() -> Server:
    return Server()


def test_the_crd_is_established_and_its_group_discovered(server: Server) -> None:
    name = "driverrollouts.gpu-upgrader.io"
    crd = server.cluster.get("customresourcedefinitions", name, None, "apiextensions.k8s.io")
    assert crd is not None
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    status, groups = server.call("GET", "/apis")
    assert status == 200 and "gpu-upgrader.io" in [g["name"] for g in groups["groups"]]
    status, resources = server.call("GET", "/apis/gpu-upgrader.io/v1alpha1")
    assert [(r["name"], r["namespaced"]) for r in resources["resources"]] == [
        ("driverrollouts", False), ("driverrollouts/status", False)
    ]


def test_the_schema_refuses_in_apimachinerys_words_all_at_once(server: Server) -> None:
    status, answer = server.create(
        {"maxParallelUpgrades": -1, "maxUnavailable": "x", "onBlockedTimeout": "nope", "paused": "yes"}
    )
    assert status == 422
    assert answer["message"] == (
        'DriverRollout.gpu-upgrader.io "default" is invalid: ['
        "spec.maxParallelUpgrades: Invalid value: -1: spec.maxParallelUpgrades in body should be greater than or "
        "equal to 0, "
        "spec.maxUnavailable: Invalid value: \"x\": spec.maxUnavailable in body should match '^([0-9]+|[0-9]{1,3}%)$', "
        'spec.onBlockedTimeout: Unsupported value: "nope": supported values: "halt", "fail", '
        'spec.paused: Invalid value: "string": spec.paused in body must be of type boolean: "string"]'
    )
    assert [c["field"] for c in answer["details"]["causes"]] == [
        "spec.maxParallelUpgrades", "spec.maxUnavailable", "spec.onBlockedTimeout", "spec.paused"
    ]
    assert server.call("GET", f"{BASE}/default")[0] == 404, "nothing was stored"


def test_unknown_fields_are_pruned_or_under_strict_validation_refused(server: Server) -> None:
    status, answer = server.create({"bogus": 1, "drain": {"enable": True, "x": 2}}, query="fieldValidation=Strict")
    assert status == 400
    assert answer["message"] == (
        'DriverRollout in version "v1alpha1" cannot be handled as a DriverRollout: strict decoding error: '
        'unknown field "spec.bogus", unknown field "spec.drain.x"'
    )
    status, stored = server.create({"bogus": 1, "maxUnavailable": 3, "drain": None, "failureDomains": {"order": ["a"]}})
    assert status == 201
    assert stored["spec"] == {"maxUnavailable": 3, "failureDomains": {"order": ["a"]}}, "unknown and null pruned"
    assert stored["metadata"]["generation"] == 1


def test_a_set_refuses_a_duplicate_and_int_or_string_takes_both(server: Server) -> None:
    status, answer = server.create({"failureDomains": {"order": ["a", "a"]}, "maxUnavailable": True})
    assert status == 422
    assert 'spec.failureDomains.order[1]: Duplicate value: "a"' in answer["message"]
    assert 'spec.maxUnavailable: Invalid value: "boolean": spec.maxUnavailable in body must be of type ' in (
        answer["message"]
    )
    assert server.create({"maxUnavailable": "25%"})[0] == 201


@pytest.mark.parametrize(("value", "stored"), [(2, True), ("5%", True), ("100%", True), (0, False), ("0%", False),
                                             ("5", False), ("120%", False)])
def test_canary_nodes_takes_a_count_or_a_percentage(server: Server, value: int | str, stored: bool) -> None:
    status, answer = server.create({"failureDomains": {"canary": "a", "canaryNodes": value}})
    assert (status == 201) is stored, answer
    if not stored:
        assert answer["details"]["causes"][0]["field"] == "spec.failureDomains.canaryNodes"


def test_strategic_merge_is_refused_and_spec_and_status_are_written_apart(server: Server) -> None:
    server.create({"maxParallelUpgrades": 1})
    status, answer = server.call("PATCH", f"{BASE}/default", {"spec": {"paused": True}}, STRATEGIC)
    assert (status, answer["reason"]) == (415, "UnsupportedMediaType")
    assert answer["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    status, obj = server.call("PATCH", f"{BASE}/default", {"spec": {"paused": True}, "status": {"phase": "X"}}, MERGE)
    assert status == 200 and obj["metadata"]["generation"] == 2 and "status" not in obj, "the main resource: spec only"
    status, obj = server.call(
        "PATCH", f"{BASE}/default/status", {"status": {"phase": "Running"}, "spec": {"paused": False}}, MERGE
    )
    assert status == 200 and obj["status"] == {"phase": "Running"}
    assert obj["spec"]["paused"] is True and obj["metadata"]["generation"] == 2, "status writes change no spec"
    status, obj = server.call("PATCH", f"{BASE}/default", {"metadata": {"labels": {"team": "ml"}}}, MERGE)
    assert obj["metadata"]["generation"] == 2, "metadata is no generation"
    status, answer = server.call("PATCH", f"{BASE}/default/status", {"status": {"nodesTotal": "six"}}, MERGE)
    assert status == 422 and "status.nodesTotal in body must be of type integer" in answer["message"]


def test_tables_show_the_printer_columns(server: Server) -> None:
    server.create({})
    server.call("PATCH", f"{BASE}/default/status",
                {"status": {"phase": "Running", "progress": "2/6", "blockedCount": 1, "currentDomain": "us-east-1b"}},
                MERGE)
    server.cluster.advance(90)
    status, table = server.call("GET", BASE, accept=TABLE)
    assert status == 200
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0), ("Phase", 0), ("Done", 0), ("Blocked", 0), ("Domain", 0), ("Waiting-On", 1), ("Next", 1),
        ("Age", 0),
    ]
    assert table["rows"][0]["cells"] == ["default", "Running", "2/6", 1, "us-east-1b", None, None, "90s"]


def test_every_policy_key_has_a_place_in_the_schema() -> None:
    """A key the CRD does not know is pruned by the API server: the controller would never see it."""
    from upgrader.core.policy.policy import Policy
    from upgrader.core.policy.rollout_object import INTENT_KEYS

    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def missing(model: type[BaseModel], schema: dict[str, Any], where: str) -> list[str]:
        out = []
        props = schema.get("properties") or {}
        for name, field in model.model_fields.items():
            key = field.serialization_alias or field.alias or name
            if key not in props:
                out.append(f"{where}{key}")
                continue
            for inner, at in _models_in(field.annotation, props[key]):
                out += missing(inner, at, f"{where}{key}.")
        return out

    assert missing(Policy, spec, "spec.") == []
    assert set(INTENT_KEYS) <= set(spec["properties"])


def _models_in(annotation: Any, schema: dict[str, Any]) -> list[tuple[type[BaseModel], dict[str, Any]]]:
    """The models a field holds, with the schema each is checked against: itself, inside an Optional,
    or the items of a list or tuple (the schema's `items`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, schema)]
    args = [a for a in typing.get_args(annotation) if a is not type(None) and a is not Ellipsis]
    origin = typing.get_origin(annotation)
    if origin in (tuple, list):
        return [m for a in args for m in _models_in(a, schema.get("items") or {})]
    return [m for a in args for m in _models_in(a, schema)]
