"""Is there GPU room for the pods a node's upgrade evicts? The `insufficient-gpu-capacity` finding,
and the run's `insufficient-gpu-capacity` wait under `gpuCapacity.onInsufficient: wait`.

For a node about to start, the GPU pods it evicts that a controller recreates elsewhere (owned by a
ReplicaSet, StatefulSet or any controller but a Job or DaemonSet) are placed, in the order they
are evicted and each where the most room is left (kube-scheduler spreads), on the free GPU and MIG
resources of the other nodes they may run on (`placement`: nodeSelector, required node affinity,
tolerated taints). Free is a node's allocatable minus what its
non-terminal pods request, per resource name. A node cordoned, not Ready, or starting together with
it (the same wave in `plan`, the same pass in `run`) offers nothing. Each node is judged alone against
the fleet as it is now. Bare pods and Job pods are named, not counted: nothing recreates them on
another node. Pods holding GPUs through DRA claims only are not checked.

`plan` warns (or, when `run` would wait on it, blocks); `run` either starts the node and says so in
an Event (warn) or holds it at upgrade-required until room appears (wait): a pod left Pending is an
outage of that workload.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import compress, repeat
from operator import is_not, or_

from upgrader.core.model.findings import BLOCKING, WARNING, Finding
from upgrader.core.model.gpupods import GpuClaims, gpu_pods
from upgrader.core.model.views import NodeView, PodView
from upgrader.core.node.gpu_room import Room, RoomMemo

KIND = "insufficient-gpu-capacity"
SHOWN = 5  # names listed before "and N more"
NOT_RECREATED = {None: "no controller", "Job": "Job"}


def _some(items: Sequence[str], count: int | None = None) -> str:
    """The first SHOWN of `items` (of `count` in all, when only the first are given), and how many more."""
    count = len(items) if count is None else count
    more = f" and {count - SHOWN} more" if count > SHOWN else ""
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


def evicted_gpu_pods(pods: Iterable[PodView], claims: GpuClaims) -> list[PodView]:
    """The pods a node's upgrade deletes or evicts that hold GPUs (DaemonSet pods stay; mirror pods
    are the kubelet's)."""
    return [p for p in gpu_pods(list(pods), claims) if not p.mirror and p.owner_kind != "DaemonSet"]


def room_by_node(
    nodes: Mapping[str, NodeView],
    pods_by_node: Mapping[str, Sequence[PodView]],
    memo: RoomMemo | None = None,
    changed: set[str] | None = None,
) -> dict[str, dict[str, int]]:
    """`free_capacity` of every node with GPU or MIG resources: computed once per pass or plan, not
    once per node judged. With `memo` (the controller's, between passes), a node whose view and pods
    are the very objects of the last pass keeps its answer (the watch-fed copies hand the same
    objects out until they change, and lists are never changed in place); the others, and those
    that came or went, are added to `changed`. The returned mapping is the memo's: not to be changed."""
    if memo is None:
        return {n: free_capacity(node, pods_by_node.get(n, ())) for n, node in nodes.items() if node.allocatable}
    same = len(nodes) == len(memo.names) and nodes.keys() == memo.known  # the same nodes, in any order
    names = memo.names if same else list(nodes)  # in the memo's order: compared object by object, in C
    views = list(map(nodes.__getitem__, names))
    pods = list(map(pods_by_node.get, names, repeat(_NONE)))
    if same:
        moved = set(compress(names, map(or_, map(is_not, views, memo.views), map(is_not, pods, memo.pods))))
        room = dict(memo.room)
        for name in moved:
            node = nodes[name]
            if node.allocatable:
                room[name] = free_capacity(node, pods_by_node.get(name, _NONE))
            else:
                room.pop(name, None)
    else:
        moved = {*names, *memo.names}
        room = {n: free_capacity(node, pods_by_node.get(n, _NONE)) for n, node in nodes.items() if node.allocatable}
        memo.names, memo.known = names, frozenset(names)
    memo.views, memo.pods, memo.room = views, pods, room
    if changed is not None:
        changed.update(moved)
    return room


_NONE: Sequence[PodView] = ()


def shortage(
    node: str,
    evicted: Sequence[PodView],
    model: Room,
    together: Collection[str] = (),
    together_why: str = "starting with it",
) -> str | None:
    """Why the recreated pods of `evicted` would not all find room (None when they would), on the
    fleet's room as `model` holds it; `together`: the other nodes cordoned with this one, unavailable
    for `together_why`."""
    # In the order the upgrade evicts them (by key), each on the fitting node with the most room left:
    # kube-scheduler's default scoring spreads (LeastAllocated), it does not pack. Best-fit packing
    # (largest first, tightest node) promised room the emulator's scheduler then did not find.
    moving = sorted(
        (p for p in evicted if p.owner_kind not in NOT_RECREATED and p.owner_kind != "DaemonSet" and p.gpu_requests),
        key=lambda p: p.key,
    )
    if not moving:
        return None
    pending = model.place(moving, {node, *together})
    if not pending:
        return None
    wanted = {name for p in moving for name in p.gpu_requests}
    return _message(node, pending, evicted, wanted, model, together, together_why)


def _message(
    node: str,
    pending: Sequence[PodView],
    evicted: Sequence[PodView],
    wanted: set[str],
    model: Room,
    together: Collection[str],
    together_why: str,
) -> str:
    stuck = _some([f"{p.key} ({_amounts(p.gpu_requests)})" for p in pending])
    free_parts = []
    for resource in sorted(wanted):
        total, holders, count = model.free(resource, {node, *together})
        where = f" ({_some(holders, count)})" if count else ""
        free_parts.append(f"{resource} {total}{where}")
    down, count = model.unavailable(node, wanted, together, together_why)
    text = (
        f"{len(pending)} evicted GPU pod(s) would stay Pending, no node they may run on having room: {stuck}; "
        f"free on available nodes: {', '.join(free_parts)}; counted unavailable: {_some(down, count) or 'none'}"
    )
    gone = sorted(
        f"{p.key} ({NOT_RECREATED[p.owner_kind]})" for p in evicted if p.owner_kind in NOT_RECREATED
    )
    if gone:
        text += f"; not counted, nothing recreates them elsewhere: {_some(gone)}"
    return text


WAITS = "; `run` holds the node at upgrade-required until room appears (gpuCapacity.onInsufficient: wait)"


def capacity_findings(
    upgrades: Sequence[tuple[str, int | None, Sequence[PodView]]],
    nodes: Mapping[str, NodeView],
    pods_by_node: Mapping[str, Sequence[PodView]],
    run_waits: bool = False,
) -> list[Finding]:
    """`upgrades`: (node, wave, the GPU pods it evicts) for each node the plan upgrades, wave 0 for the
    nodes in progress. A warning, or blocking where `run` would hold the node (`run_waits`, a node not
    started yet): the rollout would not finish by itself."""
    waves: dict[int, set[str]] = {}
    for name, wave, _ in upgrades:
        if wave is not None:
            waves.setdefault(wave, set()).add(name)
    out = []
    model = Room(nodes, room_by_node(nodes, pods_by_node))
    for name, wave, evicted in upgrades:
        together = waves.get(wave, set()) - {name} if wave is not None else set()
        text = shortage(name, evicted, model, together, f"upgraded with it in wave {wave}")
        if text is not None:
            held = run_waits and wave != 0
            out.append(Finding(KIND, BLOCKING if held else WARNING, name, text + (WAITS if held else "")))
    return out
