"""GPU Operator `NVIDIADriver` resources (nvidia.com/v1alpha1): which GPU node each one selects.

With one `NVIDIADriver` per driver branch, two non-default resources must never select the same
GPU node: the Operator's node-selector validation then fails and the resources go notReady with
the condition reason `ConflictingNodeSelector`. A resource without a `spec.nodeSelector` selects
every GPU node. Overlap is judged on the labels real nodes carry, never by comparing selector
text: `pool: serve` and `branch: "535"` share no key and still both select a 535 serving node.

Where `default` lives: the Operator's API type `NVIDIADriverSpec` has a boolean `spec.default`
("this NVIDIADriver acts as the fallback driver daemon set manager for GPU nodes that do not match
any non-default NVIDIADriver nodeSelector"), with a CEL rule that a default resource must leave
`spec.nodeSelector` unset or empty; its node-selector validation skips default resources when it
looks for overlap. The NVIDIADriver documentation pages we found do not mention the field, and
older Operator releases do not have it: there the Helm chart's resource named `default` is an
ordinary resource without a selector, so it overlaps every other resource. This module reads only
`spec.default` (a JSON boolean); the name `default` means nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from upgrader.core.model.findings import BLOCKING, Finding
from upgrader.core.model.selectors import node_selector_matches
from upgrader.core.model.views import NodeView

KIND = "conflicting-node-selector"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"


@dataclass(frozen=True)
class DriverResource:
    name: str
    node_selector: Mapping[str, str] | None  # None: no selector, every GPU node
    default: bool

    def selects(self, node: NodeView) -> bool:
        return node_selector_matches(self.node_selector, node.labels)


def driver_resource(obj: Mapping[str, Any]) -> DriverResource:
    """A `NVIDIADriver` from its JSON; a `ValueError` naming the field when the object is malformed."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError("NVIDIADriver without metadata.name")
    spec = obj.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise ValueError(f"NVIDIADriver {name}: spec is not an object")
    default = spec.get("default", False)
    if default is None:
        default = False
    if not isinstance(default, bool):
        raise ValueError(f"NVIDIADriver {name}: spec.default is {default!r}, not a boolean")
    raw = spec.get("nodeSelector")
    selector: dict[str, str] | None = None
    if raw is not None:
        if not isinstance(raw, Mapping):
            raise ValueError(f"NVIDIADriver {name}: spec.nodeSelector is not a map of labels")
        for key, value in raw.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(
                    f"NVIDIADriver {name}: spec.nodeSelector entry {key!r}: {value!r} is not a string label"
                )
        selector = dict(raw)
    return DriverResource(name=name, node_selector=selector, default=default)


def gpu_nodes(nodes: Iterable[NodeView]) -> list[NodeView]:
    """Nodes labelled `nvidia.com/gpu.present=true`, or with a non-zero `nvidia.com/gpu` capacity."""
    return [n for n in nodes if n.labels.get(GPU_PRESENT_LABEL) == "true" or _has_gpu_capacity(n)]


def _has_gpu_capacity(node: NodeView) -> bool:
    capacity = (node.gpu_capacity or "").strip()
    return capacity not in ("", "0")


def _describe(selector: Mapping[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) if selector else "(none)"


def selector_findings(resources: Sequence[DriverResource], gpu_nodes: Sequence[NodeView]) -> list[Finding]:
    """Blocking findings for NVIDIADriver selectors the Operator would refuse.

    One finding per GPU node that two or more non-default resources select; one (node None) when
    more than one resource is the default; one (node None) per default resource with a selector.
    """
    findings = []
    defaults = sorted(r.name for r in resources if r.default)
    if len(defaults) > 1:
        findings.append(
            Finding(
                KIND,
                BLOCKING,
                None,
                f"{len(defaults)} NVIDIADriver resources are default: true ({', '.join(defaults)}); "
                "only one may be the default: set default: false on all but one",
            )
        )
    for resource in sorted((r for r in resources if r.default and r.node_selector), key=lambda r: r.name):
        findings.append(
            Finding(
                KIND,
                BLOCKING,
                None,
                f"default NVIDIADriver {resource.name} has a nodeSelector "
                f"({_describe(resource.node_selector)}); a default resource takes every GPU node no other "
                "resource selects and must have none: remove the selector, or set default: false",
            )
        )
    regular = [r for r in resources if not r.default]
    for node in sorted(gpu_nodes, key=lambda n: n.name):
        owners = sorted(r.name for r in regular if r.selects(node))
        if len(owners) < 2:
            continue
        both = "both" if len(owners) == 2 else f"all {len(owners)}"
        selectors = "; ".join(
            f"{r.name}: {_describe(r.node_selector)}" for r in sorted(regular, key=lambda r: r.name) if r.name in owners
        )
        findings.append(
            Finding(
                KIND,
                BLOCKING,
                node.name,
                f"GPU node {node.name} is selected by NVIDIADriver resources {', '.join(owners)} "
                f"(nodeSelector {selectors}); {both} would go notReady with ConflictingNodeSelector: "
                "narrow the selectors or relabel the node so exactly one selects it",
            )
        )
    return findings
