"""Interlocks with the GPU Operator: only one thing may drive a driver upgrade.

upgrader refuses to start, and halts a rollout under way (writing nothing on the nodes), while
- the GPU Operator's own upgrade controller is on for a driver DaemonSet upgrader manages: ClusterPolicy
  `spec.driver.upgradePolicy.autoUpgrade` (for the DaemonSets the ClusterPolicy owns, or that no
  NVIDIADriver owns), or an NVIDIADriver's `spec.upgradePolicy.autoUpgrade` (for the DaemonSets it owns);
- a driver DaemonSet's `updateStrategy` is not `OnDelete`: Kubernetes itself would replace every driver
  pod, under running jobs.
`plan` reports each as blocking. Each line names the object and the command that ends it
(docs/migrating-from-gpu-operator.md, runbooks/install-beside-gpu-operator.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from upgrader.core.model.views import DriverSet, Interlock

RUNBOOK = "runbooks/install-beside-gpu-operator.md"
AUTO_UPGRADE = "gpu-operator-auto-upgrade"
UPDATE_STRATEGY = "driver-update-strategy"
CLUSTER_POLICY = "ClusterPolicy"
NVIDIA_DRIVER = "NVIDIADriver"


@dataclass(frozen=True)
class OperatorUpgrade:
    """A ClusterPolicy or NVIDIADriver, and whether its upgrade controller is on (None: unreadable)."""

    kind: str
    name: str
    auto_upgrade: bool | None


def operator_upgrade(kind: str, obj: Mapping[str, Any]) -> OperatorUpgrade:
    """From a ClusterPolicy (`spec.driver.upgradePolicy.autoUpgrade`) or an NVIDIADriver
    (`spec.upgradePolicy.autoUpgrade`); absent or null is off, as in the Operator; anything but a
    boolean cannot be judged."""
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    section = spec.get("driver") if kind == CLUSTER_POLICY else spec
    policy = section.get("upgradePolicy") if isinstance(section, Mapping) else None
    value = policy.get("autoUpgrade") if isinstance(policy, Mapping) else None
    auto = False if value is None else value if isinstance(value, bool) else None
    return OperatorUpgrade(kind, str(meta.get("name", "")), auto)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _off_command(upgrade: OperatorUpgrade) -> str:
    if upgrade.kind == CLUSTER_POLICY:
        patch = '{"spec":{"driver":{"upgradePolicy":{"autoUpgrade":false}}}}'
        return f"kubectl patch clusterpolicies.nvidia.com {upgrade.name} --type merge -p '{patch}'"
    patch = '{"spec":{"upgradePolicy":{"autoUpgrade":false}}}'
    return f"kubectl patch nvidiadrivers.nvidia.com {upgrade.name} --type merge -p '{patch}'"


def _governs(upgrade: OperatorUpgrade, ds: DriverSet) -> bool:
    """Its owner governs a DaemonSet; any ClusterPolicy one that neither kind owns."""
    if ds.owner is not None and ds.owner[0] in (NVIDIA_DRIVER, CLUSTER_POLICY):
        return (upgrade.kind, upgrade.name) == ds.owner
    return upgrade.kind == CLUSTER_POLICY


def judge(
    upgrades: Sequence[OperatorUpgrade], driver_sets: Sequence[DriverSet], unreadable: str | None = None
) -> tuple[Interlock, ...]:
    """Why upgrader must not drive these driver DaemonSets now, one line each; empty when nothing stands
    in the way. `unreadable`: why the Operator's objects could not be read (then it cannot judge)."""
    out: list[Interlock] = []
    if unreadable is not None:
        out.append(Interlock(AUTO_UPGRADE,
            f"cannot tell whether the GPU Operator's upgrade controller is on: {unreadable}; upgrader acts on no "
            f"node until it can; see {RUNBOOK}"
        ))
    for upgrade in upgrades:
        governed = sorted(ds.key for ds in driver_sets if _governs(upgrade, ds))
        if not governed or upgrade.auto_upgrade is False:
            continue
        field = "spec.driver.upgradePolicy.autoUpgrade" if upgrade.kind == CLUSTER_POLICY else (
            "spec.upgradePolicy.autoUpgrade"
        )
        said = "is true" if upgrade.auto_upgrade else "is not a boolean"
        out.append(Interlock(AUTO_UPGRADE,
            f"{upgrade.kind} {upgrade.name} {field} {said}: the GPU Operator's own upgrade controller drives driver "
            f"DaemonSet {', '.join(governed)} too; turn it off: {_off_command(upgrade)}; see {RUNBOOK}"
        ))
    policies = [u.name for u in upgrades if u.kind == CLUSTER_POLICY] or ["<cluster-policy>"]
    for ds in sorted(driver_sets, key=lambda d: d.key):
        if ds.update_strategy == "OnDelete":
            continue
        patch = '{"spec":{"daemonsets":{"updateStrategy":"OnDelete"}}}'
        out.append(Interlock(UPDATE_STRATEGY,
            f"driver DaemonSet {ds.key} has updateStrategy {ds.update_strategy}: Kubernetes itself replaces its "
            f"driver pods, under running jobs; set ClusterPolicy spec.daemonsets.updateStrategy OnDelete: "
            f"kubectl patch clusterpolicies.nvidia.com {policies[0]} --type merge -p '{patch}'; see {RUNBOOK}"
        ))
    return tuple(out)
