"""Table-driven tests of `upgrader.sim.apiserver.patch`: JSON merge patch, strategic merge patch, JSON patch."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from upgrader.sim.apiserver.errors import ApiError
from upgrader.sim.apiserver.patch import apply_patch, json_patch, merge_patch, strategic_merge_patch

# RFC 7386, appendix A, in full.
RFC7386 = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC7386)
def test_merge_patch_rfc7386(target: Any, patch: Any, expected: Any) -> None:
    original = copy.deepcopy(target)
    assert merge_patch(target, patch) == expected
    assert target == original  # the input is never changed


POD: dict[str, Any] = {
    "metadata": {"labels": {"a": "1"}, "finalizers": ["x"]},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "app:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            },
            {"name": "side", "image": "side:1"},
        ],
        "tolerations": [{"key": "t1", "operator": "Exists"}, {"key": "t2", "operator": "Exists"}],
        "volumes": [{"name": "v1", "emptyDir": {}}],
        "nodeSelector": {"pool": "gpu", "zone": "a"},
    },
    "status": {
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]
    },
}


@pytest.mark.parametrize(
    ("patch", "path", "expected"),
    [
        ({"metadata": {"labels": {"b": "2"}}}, ("metadata", "labels"), {"a": "1", "b": "2"}),
        ({"metadata": {"labels": {"a": None}}}, ("metadata", "labels"), {}),
        (  # containers merge by name; fields inside merge too
            {"spec": {"containers": [{"name": "main", "image": "app:2"}]}},
            ("spec", "containers"),
            [
                {
                    "name": "main",
                    "image": "app:2",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                },
                {"name": "side", "image": "side:1"},
            ],
        ),
        (
            {"spec": {"containers": [{"name": "new", "image": "n:1"}]}},
            ("spec", "containers"),
            [*POD["spec"]["containers"], {"name": "new", "image": "n:1"}],
        ),
        (
            {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}},
            ("spec", "containers"),
            [POD["spec"]["containers"][0]],
        ),
        (  # env merges by name inside a merged container
            {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "3"}]}]}},
            ("spec", "containers", 0, "env"),
            [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}],
        ),
        (  # conditions merge by type
            {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Drained"}]}},
            ("status", "conditions"),
            [
                {"type": "Ready", "status": "False", "reason": "Drained"},
                {"type": "PodScheduled", "status": "True"},
            ],
        ),
        (  # tolerations are an atomic list: a patch replaces them
            {"spec": {"tolerations": [{"key": "t3", "operator": "Exists"}]}},
            ("spec", "tolerations"),
            [{"key": "t3", "operator": "Exists"}],
        ),
        (  # finalizers merge as a set of strings
            {"metadata": {"finalizers": ["y", "x"]}},
            ("metadata", "finalizers"),
            ["x", "y"],
        ),
        (
            {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}},
            ("metadata", "finalizers"),
            [],
        ),
        (  # $patch: replace swaps a whole map
            {"spec": {"nodeSelector": {"$patch": "replace", "pool": "cpu"}}},
            ("spec", "nodeSelector"),
            {"pool": "cpu"},
        ),
        (  # directives kubectl sends are accepted and do not land in the object
            {
                "spec": {
                    "$setElementOrder/volumes": [{"name": "v1"}],
                    "volumes": [{"name": "v1", "emptyDir": {}}],
                }
            },
            ("spec",),
            {key: value for key, value in POD["spec"].items()},
        ),
    ],
    ids=[
        "add-label",
        "remove-label",
        "merge-container",
        "add-container",
        "delete-container",
        "merge-env",
        "merge-condition",
        "replace-tolerations",
        "merge-finalizers",
        "delete-finalizer",
        "replace-map",
        "set-element-order",
    ],
)
def test_strategic_merge_patch(patch: Any, path: tuple[Any, ...], expected: Any) -> None:
    original = copy.deepcopy(POD)
    result = strategic_merge_patch(POD, patch)
    for part in path:
        result = result[part]
    assert result == expected
    assert original == POD


NODE: dict[str, Any] = {
    "metadata": {"name": "n", "labels": {"a": "1", "nvidia.com/gpu.present": "true"}},
    "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}], "podCIDRs": ["10.0.0.0/24"]},
}


@pytest.mark.parametrize(
    ("ops", "path", "expected"),
    [
        ([{"op": "add", "path": "/metadata/labels/b", "value": "2"}], ("metadata", "labels", "b"), "2"),
        ([{"op": "add", "path": "/metadata/labels/a", "value": "9"}], ("metadata", "labels", "a"), "9"),
        (
            [{"op": "remove", "path": "/metadata/labels/nvidia.com~1gpu.present"}],
            ("metadata", "labels"),
            {"a": "1"},
        ),
        ([{"op": "replace", "path": "/metadata/labels/a", "value": "2"}], ("metadata", "labels", "a"), "2"),
        (
            [{"op": "add", "path": "/spec/taints/-", "value": {"key": "k2", "effect": "NoExecute"}}],
            ("spec", "taints"),
            [{"key": "k1", "effect": "NoSchedule"}, {"key": "k2", "effect": "NoExecute"}],
        ),
        (
            [{"op": "add", "path": "/spec/taints/0", "value": {"key": "k0"}}],
            ("spec", "taints"),
            [{"key": "k0"}, {"key": "k1", "effect": "NoSchedule"}],
        ),
        ([{"op": "remove", "path": "/spec/taints/0"}], ("spec", "taints"), []),
        ([{"op": "replace", "path": "/spec/podCIDRs/0", "value": "x"}], ("spec", "podCIDRs"), ["x"]),
        (
            [{"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/c"}],
            ("metadata", "labels"),
            {"a": "1", "nvidia.com/gpu.present": "true", "c": "1"},
        ),
        (
            [{"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/z"}],
            ("metadata", "labels"),
            {"nvidia.com/gpu.present": "true", "z": "1"},
        ),
        (
            [
                {"op": "test", "path": "/metadata/labels/a", "value": "1"},
                {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
            ],
            ("metadata", "labels", "a"),
            "2",
        ),
        (
            [{"op": "test", "path": "/spec/taints/0", "value": {"key": "k1", "effect": "NoSchedule"}}],
            ("spec", "taints", 0, "key"),
            "k1",
        ),
    ],
    ids=[
        "add",
        "add-existing-replaces",
        "remove-escaped-key",
        "replace",
        "append",
        "insert",
        "remove-index",
        "replace-index",
        "copy",
        "move",
        "test-then-replace",
        "test-array-element",
    ],
)
def test_json_patch(ops: list[dict[str, Any]], path: tuple[Any, ...], expected: Any) -> None:
    original = copy.deepcopy(NODE)
    result: Any = json_patch(NODE, ops)
    for part in path:
        result = result[part]
    assert result == expected
    assert original == NODE


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/metadata/labels/a", "value": "2"}],
        [{"op": "test", "path": "/metadata/labels/missing", "value": None}],
        [{"op": "remove", "path": "/metadata/labels/missing"}],
        [{"op": "replace", "path": "/metadata/labels/missing", "value": "x"}],
        [{"op": "add", "path": "/metadata/annotations/x", "value": "y"}],  # parent does not exist
        [{"op": "remove", "path": "/spec/taints/5"}],
        [{"op": "replace", "path": "/spec/taints/1", "value": {}}],
        [{"op": "add", "path": "/spec/taints/2", "value": {}}],  # past the end
        [{"op": "add", "path": "/spec/taints/x", "value": {}}],
        [{"op": "test", "path": "/spec/taints/01", "value": {}}],  # no leading zeros
        [{"op": "add", "path": "/spec/taints/0/key/deeper", "value": 1}],  # into a string
        [{"op": "frobnicate", "path": "/metadata/name"}],
        [{"op": "add", "path": "metadata/name", "value": "x"}],  # not a pointer
        [{"op": "replace", "path": "", "value": {}}],
    ],
)
def test_json_patch_errors_are_422(ops: list[dict[str, Any]]) -> None:
    original = copy.deepcopy(NODE)
    with pytest.raises(ApiError) as err:
        json_patch(NODE, ops)
    assert err.value.code == 422
    assert err.value.reason == "Invalid"
    assert original == NODE


def test_json_patch_is_all_or_nothing() -> None:
    with pytest.raises(ApiError):
        json_patch(
            NODE,
            [
                {"op": "add", "path": "/metadata/labels/b", "value": "2"},
                {"op": "test", "path": "/metadata/labels/a", "value": "nope"},
            ],
        )
    assert "b" not in NODE["metadata"]["labels"]


@pytest.mark.parametrize(
    ("content_type", "patch", "expected_labels"),
    [
        (
            "application/merge-patch+json",
            {"metadata": {"labels": {"a": None}}},
            {"nvidia.com/gpu.present": "true"},
        ),
        (
            "application/strategic-merge-patch+json; charset=utf-8",
            {"metadata": {"labels": {"b": "2"}}},
            {"a": "1", "nvidia.com/gpu.present": "true", "b": "2"},
        ),
        (
            "application/json-patch+json",
            [{"op": "replace", "path": "/metadata/labels/a", "value": "3"}],
            {"a": "3", "nvidia.com/gpu.present": "true"},
        ),
        (
            "application/apply-patch+yaml",
            {"metadata": {"labels": {"c": "4"}}},
            {"a": "1", "nvidia.com/gpu.present": "true", "c": "4"},
        ),
    ],
)
def test_apply_patch_dispatches_on_content_type(content_type: str, patch: Any, expected_labels: Any) -> None:
    assert apply_patch(content_type, NODE, patch)["metadata"]["labels"] == expected_labels


@pytest.mark.parametrize(
    ("content_type", "patch", "code"),
    [
        ("application/merge-patch+json", ["not", "an", "object"], 400),
        ("application/strategic-merge-patch+json", "text", 400),
        ("application/json-patch+json", {"op": "add"}, 400),
        ("application/xml", {}, 415),
        ("", {}, 415),
    ],
)
def test_apply_patch_rejects_bodies_of_the_wrong_shape(content_type: str, patch: Any, code: int) -> None:
    with pytest.raises(ApiError) as err:
        apply_patch(content_type, NODE, patch)
    assert err.value.code == code
