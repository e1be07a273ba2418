"""Table-driven tests of `upgrader.core.model.selectors`: what each selector form matches, and what is invalid."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.selectors import (
    SelectorError,
    field_value,
    from_label_selector_object,
    node_selector_matches,
    parse_field_selector,
    parse_label_selector,
)

LABELS: dict[str, dict[str, str]] = {
    "web": {"app": "web", "tier": "front", "replicas": "3"},
    "db": {"app": "db", "tier": "back", "replicas": "12"},
    "bare": {},
    "prefixed": {"example.com/role": "gpu", "empty": ""},
}


def matching(selector: Any) -> list[str]:
    return [name for name, labels in LABELS.items() if selector.matches(labels)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ["web", "db", "bare", "prefixed"]),
        ("   ", ["web", "db", "bare", "prefixed"]),
        ("app=web", ["web"]),
        ("app == web", ["web"]),
        ("app!=web", ["db", "bare", "prefixed"]),  # != also matches objects without the key
        ("app in (web,db)", ["web", "db"]),
        ("app in ( web , db )", ["web", "db"]),
        ("app notin (web)", ["db", "bare", "prefixed"]),  # notin also matches a missing key
        ("app", ["web", "db"]),
        ("!app", ["bare", "prefixed"]),
        ("! app", ["bare", "prefixed"]),
        ("app,tier=back", ["db"]),
        ("app in (web,db),tier notin (front)", ["db"]),
        ("example.com/role=gpu", ["prefixed"]),
        ("empty=", ["prefixed"]),  # the empty value, on a label that exists
        ("empty in ()", ["prefixed"]),  # `()` holds the empty value, as the real parser reads it
        ("app in (web,)", ["web"]),
        ("replicas>5", ["db"]),  # numeric comparison, not string order
        ("replicas<5", ["web"]),
        ("app>1", []),  # a value that is not an integer never compares
        ("app=nothing", []),
    ],
)
def test_label_selector_strings(text: str, expected: list[str]) -> None:
    assert matching(parse_label_selector(text)) == expected


@pytest.mark.parametrize("text", ["app=", "app==", "app!="])
def test_the_empty_value_parses(text: str) -> None:
    assert parse_label_selector(text).requirements[0].values == frozenset([""])


@pytest.mark.parametrize(
    "text",
    [
        "app in (web",
        "app=web=db",
        "!app=web",
        "!app in (web)",
        "app in web",
        "app=web,",
        ",app=web",
        "app=-web",
        "a b",
        "app=" + "v" * 64,
        "k" * 64,
        "x" * 254 + "/name",
        "Upper.Case/name",
        "app>one",
        "app>-1",
        "app>=1",
    ],
)
def test_invalid_label_selector_strings(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(text)


@pytest.mark.parametrize(
    "text",
    ["k" * 63, "a" * 253 + "/" + "n" * 63, "app=" + "v" * 63, "a.b-c_d=e.f-g_h"],
)
def test_limits_are_inclusive(text: str) -> None:
    parse_label_selector(text)


@pytest.mark.parametrize(
    "text",
    ["app in (db,web),tier", "!app", "replicas>5", "app!=web", "example.com/role=gpu"],
)
def test_a_parsed_selector_prints_back_as_an_equivalent_selector(text: str) -> None:
    parsed = parse_label_selector(text)
    assert matching(parse_label_selector(str(parsed))) == matching(parsed)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (None, []),  # a missing selector selects nothing (as on a PodDisruptionBudget)
        ({}, ["web", "db", "bare", "prefixed"]),  # an empty one selects everything
        ({"matchLabels": {"app": "web"}}, ["web"]),
        ({"matchLabels": {"app": "web", "tier": "back"}}, []),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]}, ["web", "db"]),
        (
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]},
            ["db", "bare", "prefixed"],
        ),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, ["web", "db"]),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, ["bare", "prefixed"]),
        (
            {"matchLabels": {"tier": "back"}, "matchExpressions": [{"key": "app", "operator": "Exists"}]},
            ["db"],
        ),
    ],
)
def test_structured_label_selectors(obj: Any, expected: list[str]) -> None:
    assert matching(from_label_selector_object(obj)) == expected


@pytest.mark.parametrize(
    "obj",
    [
        {"matchLabels": {"app": "bad value"}},
        {"matchLabels": {"k" * 64: "v"}},
        {"matchExpressions": [{"key": "app", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]},
        {"matchExpressions": [{"key": "", "operator": "Exists"}]},
    ],
)
def test_invalid_structured_selectors(obj: Any) -> None:
    with pytest.raises(SelectorError):
        from_label_selector_object(obj)


@pytest.mark.parametrize(
    ("node_selector", "labels", "expected"),
    [
        (None, {"a": "1"}, True),
        ({}, {}, True),
        ({"a": "1"}, {"a": "1", "b": "2"}, True),
        ({"a": "1", "b": "2"}, {"a": "1"}, False),
        ({"a": "1"}, {"a": "2"}, False),
    ],
)
def test_node_selector_maps(node_selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert node_selector_matches(node_selector, labels) is expected


POD = {
    "metadata": {"name": "p", "namespace": "ml"},
    "spec": {"nodeName": "gpu-a-01", "hostNetwork": True},
    "status": {"phase": "Running"},
}
NODE = {"metadata": {"name": "n"}, "spec": {}}


@pytest.mark.parametrize(
    ("obj", "text", "expected"),
    [
        (POD, "spec.nodeName=gpu-a-01", True),
        (POD, "spec.nodeName==gpu-a-01", True),
        (POD, "spec.nodeName!=gpu-a-01", False),
        (POD, "spec.nodeName=", False),
        ({"metadata": {"name": "q"}, "spec": {}}, "spec.nodeName=", True),
        (POD, "status.phase=Running,metadata.namespace=ml", True),
        (POD, "status.phase=Running,metadata.namespace=other", False),
        (POD, "spec.hostNetwork=true", True),
        (NODE, "spec.unschedulable=false", True),  # an unset bool is false, as the server reads it
        (NODE, "spec.unschedulable!=true", True),
        ({"metadata": {"name": "n"}, "spec": {"unschedulable": True}}, "spec.unschedulable=true", True),
        (NODE, "metadata.name = n", True),
    ],
)
def test_field_selectors(obj: dict[str, Any], text: str, expected: bool) -> None:
    assert all(r.matches(obj) for r in parse_field_selector(text)) is expected


@pytest.mark.parametrize("text", ["spec.nodeName", "=x", "spec nodeName=x", "a=b,,c=d"])
def test_invalid_field_selectors(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_field_selector(text)


def test_field_value_reads_paths() -> None:
    assert field_value(POD, "metadata.name") == "p"
    assert field_value(POD, "spec.missing.deeper") == ""
    assert field_value(POD, "metadata.name.deeper") == ""
    assert field_value(POD, "spec.hostNetwork") == "true"
