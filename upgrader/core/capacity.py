"""Is there GPU room for the pods a node's upgrade evicts? The `insufficient-gpu-capacity` finding.

For each node the plan upgrades, the GPU pods it evicts that a controller recreates elsewhere
(owned by a ReplicaSet, StatefulSet or any controller but a Job or DaemonSet) are placed, largest
request first and best fit, on the free GPU and MIG resources of the other nodes they may run on
(`placement`: nodeSelector, required node affinity, tolerated taints). Free is a node's allocatable
minus what its non-terminal pods request, per resource name. A node cordoned, not Ready, or in the
same wave (cordoned together with it: counted conservatively as unavailable) offers nothing. Each
node is judged alone against the fleet as it is now. Bare pods and Job pods are named, not counted:
nothing recreates them on another node. Pods holding GPUs through DRA claims only are not checked.

A warning, as `run` does not wait on it (yet): a pod left Pending is an outage of that workload,
not a stuck rollout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from upgrader.core.findings import WARNING, Finding
from upgrader.core.placement import may_land
from upgrader.core.views import NodeView, PodView

KIND = "insufficient-gpu-capacity"
SHOWN = 5  # names listed before "and N more"
NOT_RECREATED = {None: "no controller", "Job": "Job"}


def _some(items: Sequence[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def _amounts(requests: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {amount}" for name, amount in sorted(requests.items()))


def free_capacity(node: NodeView, pods: Iterable[PodView]) -> dict[str, int]:
    """Per GPU resource: allocatable minus the requests of the node's non-terminal pods."""
    free = dict(node.allocatable)
    for pod in pods:
        if pod.terminal:
            continue
        for name, amount in pod.gpu_requests.items():
            free[name] = free.get(name, 0) - amount
    return {name: max(amount, 0) for name, amount in free.items()}


def unavailable_reason(node: NodeView, wave: int | None, same_wave: bool) -> str | None:
    if node.unschedulable:
        return "cordoned"
    if not node.ready:
        return "not Ready"
    if same_wave:
        return f"upgraded with it in wave {wave}"
    return None


def capacity_finding(
    node: str,
    wave: int | None,
    evicted: Sequence[PodView],
    nodes: Mapping[str, NodeView],
    pods_by_node: Mapping[str, Sequence[PodView]],
    waves: Mapping[str, int | None],
) -> Finding | None:
    """The finding for one upgraded node (None when every recreated pod finds room). `waves`: the
    wave of every node the plan upgrades."""
    moving = sorted(
        (p for p in evicted if p.owner_kind not in NOT_RECREATED and p.owner_kind != "DaemonSet" and p.gpu_requests),
        key=lambda p: (-sum(p.gpu_requests.values()), p.key),
    )
    if not moving:
        return None
    wanted = {name for p in moving for name in p.gpu_requests}
    free: dict[str, dict[str, int]] = {}
    unavailable: list[str] = []
    for name in sorted(nodes):
        other = nodes[name]
        if name == node or not any(other.allocatable.get(r, 0) > 0 for r in wanted):
            continue
        why = unavailable_reason(other, wave, wave is not None and waves.get(name, None) == wave)
        if why is not None:
            unavailable.append(f"{name} ({why})")
        else:
            free[name] = free_capacity(other, pods_by_node.get(name, ()))
    found = {name: dict(amounts) for name, amounts in free.items()}
    left = {name: dict(amounts) for name, amounts in free.items()}
    pending: list[PodView] = []
    for pod in moving:
        fits = [
            name
            for name in left
            if all(left[name].get(r, 0) >= amount for r, amount in pod.gpu_requests.items())
            and may_land(pod.node_selector, pod.affinity, pod.tolerations, nodes[name].labels, name, nodes[name].taints)
        ]
        if not fits:
            pending.append(pod)
            continue
        best = min(fits, key=lambda n: (sum(left[n].get(r, 0) - a for r, a in pod.gpu_requests.items()), n))
        for r, amount in pod.gpu_requests.items():
            left[best][r] -= amount
    if not pending:
        return None
    return Finding(KIND, WARNING, node, _message(pending, evicted, found, wanted, unavailable))


def _message(
    pending: Sequence[PodView],
    evicted: Sequence[PodView],
    found: Mapping[str, Mapping[str, int]],
    wanted: set[str],
    unavailable: Sequence[str],
) -> str:
    stuck = _some([f"{p.key} ({_amounts(p.gpu_requests)})" for p in pending])
    free_parts = []
    for resource in sorted(wanted):
        holders = [(n, amounts.get(resource, 0)) for n, amounts in found.items() if amounts.get(resource, 0) > 0]
        total = sum(a for _, a in holders)
        where = f" ({_some([f'{n} {a}' for n, a in holders])})" if holders else ""
        free_parts.append(f"{resource} {total}{where}")
    text = (
        f"{len(pending)} evicted GPU pod(s) would stay Pending, no node they may run on having room: {stuck}; "
        f"free on available nodes: {', '.join(free_parts)}; counted unavailable: {_some(unavailable) or 'none'}"
    )
    gone = sorted(
        f"{p.key} ({NOT_RECREATED[p.owner_kind]})" for p in evicted if p.owner_kind in NOT_RECREATED
    )
    if gone:
        text += f"; not counted, nothing recreates them elsewhere: {_some(gone)}"
    return text


def capacity_findings(
    upgrades: Sequence[tuple[str, int | None, Sequence[PodView]]],
    nodes: Mapping[str, NodeView],
    pods_by_node: Mapping[str, Sequence[PodView]],
) -> list[Finding]:
    """`upgrades`: (node, wave, the GPU pods it evicts) for each node the plan upgrades."""
    waves = {name: wave for name, wave, _ in upgrades}
    out = []
    for name, wave, evicted in upgrades:
        finding = capacity_finding(name, wave, evicted, nodes, pods_by_node, waves)
        if finding is not None:
            out.append(finding)
    return out
