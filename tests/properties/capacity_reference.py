"""The room model as it was before core/node/gpu_room.py (issue 24): every node judged by scanning the whole
fleet for each pod. Kept here only as the oracle the property test compares the fast model with."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from upgrader.core.model.placement import may_land
from upgrader.core.model.views import NodeView, PodView
from upgrader.core.node.capacity import NOT_RECREATED, _amounts, _some


def _unavailable_reason(node: NodeView, together: Collection[str], together_why: str) -> str | None:
    if node.unschedulable:
        return "cordoned"
    if not node.ready:
        return "not Ready"
    if node.name in together:
        return together_why
    return None


def reference_shortage(
    node: str,
    evicted: Sequence[PodView],
    nodes: Mapping[str, NodeView],
    room: Mapping[str, Mapping[str, int]],
    together: Collection[str] = (),
    together_why: str = "starting with it",
) -> str | None:
    moving = sorted(
        (p for p in evicted if p.owner_kind not in NOT_RECREATED and p.owner_kind != "DaemonSet" and p.gpu_requests),
        key=lambda p: p.key,
    )
    if not moving:
        return None
    wanted = {name for p in moving for name in p.gpu_requests}
    found: dict[str, dict[str, int]] = {}
    unavailable: list[str] = []
    for name in sorted(nodes):
        other = nodes[name]
        if name == node or not any(other.allocatable.get(r, 0) > 0 for r in wanted):
            continue
        why = _unavailable_reason(other, together, together_why)
        if why is not None:
            unavailable.append(f"{name} ({why})")
        else:
            found[name] = dict(room.get(name, {}))
    left = {name: dict(amounts) for name, amounts in found.items()}
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
        best = min(fits, key=lambda n: (-sum(left[n].get(r, 0) for r in pod.gpu_requests), n))
        for r, amount in pod.gpu_requests.items():
            left[best][r] -= amount
    if not pending:
        return None
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
    gone = sorted(f"{p.key} ({NOT_RECREATED[p.owner_kind]})" for p in evicted if p.owner_kind in NOT_RECREATED)
    if gone:
        text += f"; not counted, nothing recreates them elsewhere: {_some(gone)}"
    return text
