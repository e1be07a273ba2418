"""Label keys and values refused as a real API server refuses them: a 422 Invalid Status with
apimachinery's words, on every create, update and patch (and the emulator's own writes), so the
emulated cluster never holds a label a real one could not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import node_body, status_of
from upgrader.core.model.labels import label_key_error, label_value_error
from upgrader.sim.apiserver.api import Request
from upgrader.sim.apiserver.errors import ApiError
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.largefleet import fleet_objects
from upgrader.sim.fleets.scenarios import SCENARIOS, build
from upgrader.sim.fleets.spread import build_spread

VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
PREFIX_RULE = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def refusal(core: k8s.CoreV1Api, labels: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as refused:
        core.create_node(node_body("x", labels))
    assert refused.value.status == 422
    body = status_of(refused.value)
    assert core.list_node().items == [], "nothing stored"
    return body


@pytest.mark.parametrize(
    ("value", "shown", "why"),
    [
        ("a\nb", r'"a\nb"', [VALUE_RULE]),
        ("a" * 64, '"' + "a" * 64 + '"', ["must be no more than 63 characters"]),
        ("a b", '"a b"', [VALUE_RULE]),
        ("-a", '"-a"', [VALUE_RULE]),
        ("a.", '"a."', [VALUE_RULE]),
        ("zürich", '"zürich"', [VALUE_RULE]),
        ("x\n" * 32, '"' + r"x\n" * 32 + '"', ["must be no more than 63 characters", VALUE_RULE]),
    ],
    ids=["newline", "64-chars", "space", "leading-dash", "trailing-dot", "non-ascii", "long-and-newlines"],
)
def test_a_bad_value_is_422_invalid_in_the_api_servers_words(
    core: k8s.CoreV1Api, value: str, shown: str, why: list[str]
) -> None:
    body = refusal(core, {"example.com/note": value})
    causes = [f"Invalid value: {shown}: {w}" for w in why]
    listed = [f"metadata.labels: {c}" for c in causes]
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'Node "x" is invalid: {listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"}',
        "reason": "Invalid",
        "details": {
            "name": "x",
            "kind": "Node",
            "causes": [{"reason": "FieldValueInvalid", "message": c, "field": "metadata.labels"} for c in causes],
        },
        "code": 422,
    }


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("bad key", [f"name part {NAME_RULE}"]),
        ("a" * 64, ["name part must be no more than 63 characters"]),
        ("example.com/", ["name part must be non-empty", f"name part {NAME_RULE}"]),
        ("/zone", ["prefix part must be non-empty"]),
        ("Example.com/zone", [PREFIX_RULE]),
        ("a" * 254 + "/zone", ["prefix part must be no more than 253 characters"]),
        (
            "a/b/c",
            [f"a qualified name {NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"],
        ),
    ],
    ids=["space", "64-chars", "empty-name", "empty-prefix", "upper-case-prefix", "long-prefix", "two-slashes"],
)
def test_a_bad_key_is_422_invalid_naming_the_key(core: k8s.CoreV1Api, key: str, why: list[str]) -> None:
    body = refusal(core, {key: "v"})
    assert [c["message"] for c in body["details"]["causes"]] == [f'Invalid value: "{key}": {w}' for w in why]
    assert {c["field"] for c in body["details"]["causes"]} == {"metadata.labels"}
    assert body["message"].startswith(f'Node "x" is invalid: {"[" if len(why) > 1 else ""}metadata.labels: Invalid')


@pytest.mark.parametrize(
    "labels",
    [
        {"nvidia.com/gpu-driver-upgrade-state": "upgrade-required", "empty": ""},
        {"MyValue": "my_value", "x": "12345", "y": "a" * 63, "z": "A-b.c_9"},
        {"a" * 253 + "/" + "b" * 63: "v", "k8s.io/x": "UPPER"},
    ],
    ids=["operator-labels", "edges", "longest-key"],
)
def test_valid_labels_are_stored(core: k8s.CoreV1Api, labels: dict[str, str]) -> None:
    assert core.create_node(node_body("x", labels)).metadata.labels == labels


def test_key_and_value_both_bad_list_every_error(core: k8s.CoreV1Api) -> None:
    body = refusal(core, {"bad key": "a\nb"})
    assert [c["message"].split(":")[1] for c in body["details"]["causes"]] == [' "bad key"', ' "a\\nb"']
    assert body["message"].startswith('Node "x" is invalid: [metadata.labels: Invalid value: "bad key": name part')


@pytest.mark.parametrize(
    ("content_type", "patch"),
    [
        ("merge", {"metadata": {"labels": {"note": "a\nb"}}}),
        ("strategic", {"metadata": {"labels": {"note": "a" * 64}}}),
        ("json", [{"op": "add", "path": "/metadata/labels/bad key", "value": "v"}]),
    ],
)
def test_a_patch_that_would_leave_a_bad_label_is_refused_and_changes_nothing(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, content_type: str, patch: Any
) -> None:
    core.create_node(node_body("n1", {"zone": "a"}))
    before = cluster.get("nodes", "n1")
    ctype = {
        "merge": "application/merge-patch+json",
        "strategic": "application/strategic-merge-patch+json",
        "json": "application/json-patch+json",
    }[content_type]
    with pytest.raises(ApiError) as refused:
        cluster.store.patch(cluster.type("nodes"), None, "n1", ctype, patch)
    assert refused.value.code == 422 and refused.value.message.startswith('Node "n1" is invalid: metadata.labels:')
    assert cluster.get("nodes", "n1") is before


def test_an_update_with_a_bad_label_is_refused(core: k8s.CoreV1Api) -> None:
    node = core.create_node(node_body("n1"))
    node.metadata.labels = {"note": "two words"}
    with pytest.raises(ApiException) as refused:
        core.replace_node("n1", node)
    assert refused.value.status == 422
    assert core.read_node("n1").metadata.labels == {}


def test_a_bad_label_on_an_object_of_a_named_group_says_kind_dot_group(cluster: EmulatedCluster) -> None:
    with pytest.raises(ApiError) as refused:
        cluster.create("daemonsets", {"metadata": {"name": "ds", "labels": {"app": "-x"}}}, "default", "apps")
    assert refused.value.message.startswith('DaemonSet.apps "ds" is invalid: metadata.labels: Invalid value: "-x": ')
    assert refused.value.details is not None
    assert (refused.value.details["kind"], refused.value.details["group"]) == ("DaemonSet", "apps")


def test_the_emulators_own_writes_are_held_to_the_rule(cluster: EmulatedCluster) -> None:
    cluster.create("nodes", node_body("n1"))
    with pytest.raises(ApiError) as refused:
        cluster.store.mutate(cluster.type("nodes"), None, "n1", lambda n: n["metadata"]["labels"].update(v="a\nb"))
    assert refused.value.code == 422


@pytest.mark.parametrize(("labels", "json_type"), [({"gpus": 8}, "number"), ({"on": True}, "bool")])
def test_a_label_value_that_is_not_a_string_is_400_as_json_decoding_fails(
    cluster: EmulatedCluster, labels: dict[str, Any], json_type: str
) -> None:
    raw = json.dumps(node_body("x", labels)).encode()
    answer = cluster.dispatcher.handle(Request("POST", "/api/v1/nodes", "", {"content-type": "application/json"}, raw))
    assert answer.status == 400
    assert json.loads(answer.body)["message"] == (
        f'Node in version "v1" cannot be handled as a Node: json: cannot unmarshal {json_type} '
        "into Go struct field ObjectMeta.metadata.labels of type string"
    )


def _bad_labels(cluster: EmulatedCluster) -> list[str]:
    out = []
    for rtype in list(cluster.store.registry.types.values()):
        for obj in cluster.store.objects(rtype):
            for key, value in (obj["metadata"].get("labels") or {}).items():
                if label_key_error(key) or label_value_error(value):
                    out.append(f"{rtype.kind} {obj['metadata']['name']}: {key}={value!r}")
    return out


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_builds_and_runs_with_labels_a_real_cluster_accepts(scenario: str) -> None:
    cluster = EmulatedCluster.virtual()
    build(cluster, scenario)
    cluster.advance(120)  # driver pods, validators and jobs come and go
    assert _bad_labels(cluster) == []


def test_generated_fleets_have_labels_a_real_cluster_accepts() -> None:
    cluster = EmulatedCluster.virtual()
    assert cluster.load(fleet_objects(12, 10)) > 100
    spread = EmulatedCluster.virtual()
    build_spread(spread, 8, job_every=2)
    assert _bad_labels(cluster) == [] and _bad_labels(spread) == []


def test_the_cli_offers_exactly_the_scenarios_there_are() -> None:
    """`--scenario`'s choices come from sim/fleets/catalog.py, which the CLI reads without importing
    the emulator; it must name what scenarios.SCENARIOS builds, in its order."""
    from upgrader.sim.fleets import builders, catalog

    assert tuple(SCENARIOS) == catalog.SCENARIO_NAMES
    assert builders.ZONES == catalog.ZONES
