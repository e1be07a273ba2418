"""The restart's admission guard (docs/policy.md#the-restarts-admission-guard): before the driver pod is
deleted, no new GPU pod can start on the node, whatever its path (a pod pinned by `nodeName`, a DaemonSet,
the scheduler), so none is running when the module unloads.

It is the GPU Operator's own mechanism, done before the delete rather than after it: k8s-driver-manager,
in the new driver pod, pauses the node's operand labels (`nvidia.com/gpu.deploy.<operand>`: "true" becomes
"paused-for-driver-upgrade") so their DaemonSets leave the node, the device plugin with them, and the kubelet
admits no pod that requests a GPU. upgrader pauses the same labels, records which ones it paused, waits until
the operand pods are gone, and only then deletes the driver pod on the node's pods as listed after that; it
restores the labels it paused once the new driver is Ready (the validators are operands too), leaving any
other value alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from upgrader.core.model.actions import SetLabels
from upgrader.core.model.views import NodeView, PodView

DEPLOY = "nvidia.com/gpu.deploy."
# The labels k8s-driver-manager pauses before it unloads the driver (all of its operands but the driver).
OPERAND_LABELS = tuple(
    DEPLOY + operand
    for operand in (
        "operator-validator", "container-toolkit", "device-plugin", "gpu-feature-discovery", "dcgm-exporter",
        "dcgm", "mig-manager", "nvsm", "sandbox-validator", "sandbox-device-plugin", "vgpu-device-manager",
        "client", "dra-validator", "dcgm-dra", "dcgm-exporter-dra",
    )
)
# The operand pods k8s-driver-manager waits for (their `app` label), and the label each leaves by.
OPERAND_APPS = {
    "nvidia-operator-validator": "operator-validator", "nvidia-container-toolkit-daemonset": "container-toolkit",
    "nvidia-device-plugin-daemonset": "device-plugin", "gpu-feature-discovery": "gpu-feature-discovery",
    "nvidia-dcgm-exporter": "dcgm-exporter", "nvidia-dcgm": "dcgm", "nvidia-dcgm-exporter-dra": "dcgm-exporter-dra",
    "nvidia-dcgm-dra": "dcgm-dra",
}
PAUSED = "paused-for-driver-upgrade"
RECORD = "gpu-upgrader.io/paused-operands"  # JSON: each label upgrader paused, and its value before


def paused(value: str) -> str:
    """The value a paused label takes, as k8s-driver-manager writes it ("false" and ours stay)."""
    if value in ("", "false") or PAUSED in value:
        return value
    return PAUSED if value == "true" else f"{value}_{PAUSED}"


def fenced(node: NodeView) -> bool:
    return RECORD in node.annotations


def fence(node: NodeView) -> SetLabels | None:
    """The write that pauses the node's operands and records them; None once recorded, or where the node
    has no operand label to pause (`unguarded`)."""
    before = _to_pause(node)
    if fenced(node) or not before:
        return None
    return SetLabels(node.name, {k: paused(v) for k, v in before.items()}, {RECORD: json.dumps(before, sort_keys=True)},
                     before)


def unguarded(node: NodeView) -> bool:
    """Nothing keeps a new GPU pod off the node: it carries no operand (device plugin) label of the GPU
    Operator's to pause."""
    return not fenced(node) and not _to_pause(node)


def _to_pause(node: NodeView) -> dict[str, str]:
    present = {k: node.labels[k] for k in OPERAND_LABELS if k in node.labels}
    return {k: v for k, v in present.items() if paused(v) != v}


def lift(node: NodeView) -> SetLabels | None:
    """The write that restores what the fence paused, where the label still holds our paused value, and
    drops the record; None when there is no fence. An unreadable record restores no label."""
    if not fenced(node):
        return None
    restore = {k: v for k, v in _record(node).items() if node.labels.get(k) == paused(v)}
    return SetLabels(node.name, restore, {RECORD: None}, {k: paused(v) for k, v in restore.items()})


def operands_left(node: NodeView, pods: Sequence[PodView]) -> list[PodView]:
    """The pods of the operands the fence paused still on the node, terminating ones included: they may
    still hold the driver. An operand whose label the node did not carry is not waited for."""
    paused_labels = set(_record(node))
    return [p for p in pods if DEPLOY + OPERAND_APPS.get(p.labels.get("app", ""), "?") in paused_labels
            and not p.terminal]


def _record(node: NodeView) -> dict[str, str]:
    try:
        record = json.loads(node.annotations.get(RECORD) or "{}")
    except ValueError:
        return {}
    if not isinstance(record, dict):
        return {}
    return {str(k): str(v) for k, v in record.items() if str(k).startswith(DEPLOY)}
