"""NVIDIADriver node selectors (docs/compatibility.md#nvidiadriver-selectors): two non-default resources must
never select the same GPU node, judged on real node labels; at most one default, and a default has no selector."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.fleet.nvidia_drivers import DriverResource, driver_resource, gpu_nodes, selector_findings
from upgrader.core.model.findings import BLOCKING, KINDS
from upgrader.core.model.views import NodeView, node_view


def cr(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": name},
    }
    if spec is not None:
        obj["spec"] = spec
    return obj


def node(
    name: str, labels: dict[str, str] | None = None, *, gpu: bool = True, capacity: str | None = None
) -> NodeView:
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if gpu:
        all_labels["nvidia.com/gpu.present"] = "true"
    status: dict[str, Any] = {}
    if capacity is not None:
        status["capacity"] = {"nvidia.com/gpu": capacity}
    return node_view({"metadata": {"name": name, "labels": all_labels}, "status": status})


def res(name: str, selector: dict[str, str] | None = None, default: bool = False) -> DriverResource:
    return DriverResource(name, selector, default)


# ----- driver_resource -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            cr("r535", {"driverType": "gpu", "version": "535.161.08", "nodeSelector": {"branch": "535"}}),
            DriverResource("r535", {"branch": "535"}, False),
        ),
        (cr("any"), DriverResource("any", None, False)),  # no spec at all
        (cr("any", {}), DriverResource("any", None, False)),
        (cr("any", {"nodeSelector": None}), DriverResource("any", None, False)),
        (cr("empty", {"nodeSelector": {}}), DriverResource("empty", {}, False)),
        (cr("fallback", {"default": True}), DriverResource("fallback", None, True)),
        (
            cr("fallback", {"default": False, "nodeSelector": {"a": "b"}}),
            DriverResource("fallback", {"a": "b"}, False),
        ),
        (cr("fallback", {"default": None}), DriverResource("fallback", None, False)),
        # The Helm chart's resource is named "default"; only spec.default makes a resource the default.
        (cr("default", {"driverType": "gpu"}), DriverResource("default", None, False)),
        (
            cr("two", {"nodeSelector": {"pool": "serve", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}),
            DriverResource(
                "two", {"pool": "serve", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, False
            ),
        ),
    ],
)
def test_driver_resource(obj: dict[str, Any], expected: DriverResource) -> None:
    assert driver_resource(obj) == expected


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ({"spec": {}}, "NVIDIADriver without metadata.name"),
        ({"metadata": None}, "NVIDIADriver without metadata.name"),
        ({"metadata": "r535"}, "NVIDIADriver without metadata.name"),
        ({"metadata": {}}, "NVIDIADriver without metadata.name"),
        ({"metadata": {"name": ""}}, "NVIDIADriver without metadata.name"),
        ({"metadata": {"name": 535}}, "NVIDIADriver without metadata.name"),
        (cr("r535", ["nodeSelector"]), "NVIDIADriver r535: spec is not an object"),  # type: ignore[arg-type]
        (cr("r535", {"default": "true"}), "NVIDIADriver r535: spec.default is 'true', not a boolean"),
        (cr("r535", {"default": 1}), "NVIDIADriver r535: spec.default is 1, not a boolean"),
        (
            cr("r535", {"nodeSelector": "branch=535"}),
            "NVIDIADriver r535: spec.nodeSelector is not a map of labels",
        ),
        (cr("r535", {"nodeSelector": [{"branch": "535"}]}), "spec.nodeSelector is not a map of labels"),
        (
            cr("r535", {"nodeSelector": {"branch": 535}}),
            "spec.nodeSelector entry 'branch': 535 is not a string label",
        ),
        (
            cr("r535", {"nodeSelector": {"gpu": True}}),
            "spec.nodeSelector entry 'gpu': True is not a string label",
        ),
        (cr("r535", {"nodeSelector": {"branch": None}}), "spec.nodeSelector entry 'branch': None"),
        (cr("r535", {"nodeSelector": {1: "x"}}), "spec.nodeSelector entry 1: 'x' is not a string label"),
    ],
)
def test_driver_resource_refuses_malformed_objects(obj: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError) as err:
        driver_resource(obj)
    assert needle in str(err.value)


# ----- gpu_nodes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "is_gpu"),
    [
        (node("a"), True),  # nvidia.com/gpu.present=true
        (node("b", gpu=False, capacity="8"), True),
        (node("c", gpu=False, capacity="1"), True),
        (node("d", gpu=False), False),
        (node("e", gpu=False, capacity="0"), False),
        (node("f", {"nvidia.com/gpu.present": "false"}, gpu=False), False),
        (node("g", {"nvidia.com/gpu.present": "false"}, gpu=False, capacity="8"), True),
        (node("h", {"nvidia.com/gpu.present": "True"}, gpu=False), False),  # label values are exact
    ],
)
def test_gpu_nodes(n: NodeView, is_gpu: bool) -> None:
    assert gpu_nodes([n]) == ([n] if is_gpu else [])


def test_gpu_nodes_keeps_order_and_takes_any_iterable() -> None:
    nodes = [node("z"), node("cpu", gpu=False), node("a", gpu=False, capacity="4")]
    assert [n.name for n in gpu_nodes(iter(nodes))] == ["z", "a"]


# ----- selector_findings -----------------------------------------------------------------------------

SERVE_535 = node("serve-535", {"pool": "serve", "branch": "535"})
SERVE_550 = node("serve-550", {"pool": "serve", "branch": "550"})
TRAIN_535 = node("train-535", {"pool": "train", "branch": "535"})
FLEET = [SERVE_535, SERVE_550, TRAIN_535]


def conflicted(findings: list[Any]) -> dict[str | None, str]:
    assert all(f.kind == "conflicting-node-selector" and f.severity == BLOCKING for f in findings)
    return {f.node: f.message for f in findings}


def test_the_kind_is_a_known_finding_kind() -> None:
    assert "conflicting-node-selector" in KINDS


def test_selectors_sharing_no_key_overlap_on_a_real_node() -> None:
    """DOMAIN §6: `pool: serve` and `branch: 535` share no key, yet both select a 535 serving node."""
    findings = selector_findings([res("serving", {"pool": "serve"}), res("r535", {"branch": "535"})], FLEET)
    assert len(findings) == 1
    f = findings[0]
    assert (f.kind, f.severity, f.node) == ("conflicting-node-selector", BLOCKING, "serve-535")
    assert f.message == (
        "GPU node serve-535 is selected by NVIDIADriver resources r535, serving "
        "(nodeSelector r535: branch=535; serving: pool=serve); both would go notReady with "
        "ConflictingNodeSelector: narrow the selectors or relabel the node so exactly one selects it"
    )


def test_the_same_selectors_without_such_a_node_do_not_conflict() -> None:
    """Judged on labels, not text: with no node carrying both labels there is no overlap."""
    nodes = [SERVE_550, TRAIN_535]
    assert selector_findings([res("serving", {"pool": "serve"}), res("r535", {"branch": "535"})], nodes) == []


def test_identical_selector_text_that_selects_no_node_does_not_conflict() -> None:
    resources = [res("a", {"pool": "batch"}), res("b", {"pool": "batch"})]
    assert selector_findings(resources, FLEET) == []


def test_identical_selectors_conflict_on_every_node_they_select() -> None:
    resources = [res("a", {"pool": "serve"}), res("b", {"pool": "serve"})]
    assert list(conflicted(selector_findings(resources, FLEET))) == ["serve-535", "serve-550"]


def test_a_resource_without_selector_matches_every_gpu_node() -> None:
    findings = selector_findings([res("everything"), res("r535", {"branch": "535"})], FLEET)
    assert list(conflicted(findings)) == ["serve-535", "train-535"]
    assert "r535, everything" not in findings[0].message and "everything, r535" in findings[0].message


def test_an_empty_selector_matches_every_gpu_node_too() -> None:
    findings = selector_findings([res("a", {}), res("b", {"pool": "train"})], FLEET)
    assert list(conflicted(findings)) == ["train-535"]
    assert "a: (none)" in findings[0].message


def test_two_resources_without_selectors_conflict_everywhere() -> None:
    findings = selector_findings([res("a"), res("b")], FLEET)
    assert [f.node for f in findings] == ["serve-535", "serve-550", "train-535"]  # sorted by node


def test_a_single_resource_never_conflicts() -> None:
    assert selector_findings([res("only")], FLEET) == []
    assert selector_findings([], FLEET) == []
    assert selector_findings([res("a"), res("b")], []) == []


def test_three_resources_on_one_node() -> None:
    resources = [res("zeta", {"pool": "serve"}), res("alpha", {"branch": "535"}), res("mid", {})]
    message = conflicted(selector_findings(resources, [SERVE_535]))["serve-535"]
    assert "selected by NVIDIADriver resources alpha, mid, zeta" in message
    assert "all 3 would go notReady with ConflictingNodeSelector" in message


def test_only_gpu_nodes_count() -> None:
    cpu = node("cpu-1", {"pool": "serve", "branch": "535"}, gpu=False)
    resources = [res("serving", {"pool": "serve"}), res("r535", {"branch": "535"})]
    assert selector_findings(resources, gpu_nodes([cpu])) == []
    assert list(conflicted(selector_findings(resources, gpu_nodes([cpu, SERVE_535])))) == ["serve-535"]


def test_a_default_resource_does_not_overlap() -> None:
    """The default takes the GPU nodes no other resource selects: it conflicts with nobody."""
    resources = [
        res("fallback", default=True),
        res("r535", {"branch": "535"}),
        res("r550", {"branch": "550"}),
    ]
    assert selector_findings(resources, FLEET) == []


def test_a_default_resource_with_an_empty_selector_is_fine() -> None:
    assert selector_findings([res("fallback", {}, default=True), res("r535", {"branch": "535"})], FLEET) == []


def test_more_than_one_default() -> None:
    findings = selector_findings(
        [res("zz", default=True), res("aa", default=True), res("r535", {"branch": "535"})], FLEET
    )
    assert conflicted(findings) == {
        None: "2 NVIDIADriver resources are default: true (aa, zz); only one may be the default: set "
        "default: false on all but one"
    }


def test_a_default_with_a_selector() -> None:
    findings = selector_findings([res("fallback", {"pool": "serve", "branch": "535"}, default=True)], FLEET)
    assert conflicted(findings) == {
        None: "default NVIDIADriver fallback has a nodeSelector (branch=535,pool=serve); a default resource "
        "takes every GPU node no other resource selects and must have none: remove the selector, or set "
        "default: false"
    }


def test_all_rules_together_in_order() -> None:
    resources = [
        res("d2", {"pool": "train"}, default=True),
        res("d1", default=True),
        res("serving", {"pool": "serve"}),
        res("r535", {"branch": "535"}),
    ]
    findings = selector_findings(resources, list(reversed(FLEET)))
    assert [f.node for f in findings] == [None, None, "serve-535"]
    assert "(d1, d2)" in findings[0].message
    assert findings[1].message.startswith("default NVIDIADriver d2 has a nodeSelector (pool=train)")


def test_end_to_end_from_the_api_objects() -> None:
    nodes = [
        node_view(
            {
                "metadata": {
                    "name": "gpu-a-01",
                    "labels": {"nvidia.com/gpu.present": "true", "pool": "serve", "branch": "535"},
                }
            }
        ),
        node_view(
            {
                "metadata": {"name": "gpu-a-02", "labels": {"pool": "serve"}},
                "status": {"capacity": {"nvidia.com/gpu": "8"}},
            }
        ),
        node_view({"metadata": {"name": "cpu-a-01", "labels": {"pool": "serve", "branch": "535"}}}),
    ]
    resources = [
        driver_resource(cr("default", {"driverType": "gpu", "default": True})),
        driver_resource(cr("serving", {"nodeSelector": {"pool": "serve"}, "version": "550.90.07"})),
        driver_resource(cr("r535", {"nodeSelector": {"branch": "535"}, "version": "535.161.08"})),
    ]
    findings = selector_findings(resources, gpu_nodes(nodes))
    assert [(f.node, f.kind) for f in findings] == [("gpu-a-01", "conflicting-node-selector")]
    assert findings[0].to_dict()["severity"] == "blocking"
