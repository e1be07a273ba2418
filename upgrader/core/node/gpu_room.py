"""The fleet's free GPU room, built once per `plan` or pass and asked once per node judged: the model
behind `capacity.shortage`, with the same answers, at a cost that grows with the fleet, not its square.

Built once: the nodes that are available (Ready, not cordoned) and, per GPU resource, those with room
ordered by it (most first, then by name: where kube-scheduler's spreading puts a pod). Per pod shape
(nodeSelector, required node affinity, tolerations) the nodes it may land on are judged once, on one
node of each class of nodes alike to that shape (the labels it reads, the name where it reads it, the
taints). Judging a node then walks, for each pod it evicts, from the head of its shape's order past the
few nodes this judgement excludes (the node, those starting with it) or has already given pods (kept
aside with what they have left): about pods x (wave + pods) per node judged, not pods x fleet. A pod
that requests more than one GPU resource at once is placed by the exact scan of its shape's nodes.

Kept from pass to pass (the controller's carry): `update` takes out and puts back only the nodes whose
view or pods changed, each by bisection in the orders built so far, so a pass where a few nodes
changed does not sort the fleet again (tests/properties/test_room_model.py: the same answers as a
model built afresh).
"""

from __future__ import annotations

import heapq
import itertools
import json
from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from upgrader.core.model.placement import may_land
from upgrader.core.model.views import NodeView, PodView

Shape = tuple[tuple[tuple[str, str], ...], str, tuple[Any, ...]]
FIRST = 6  # names a message may show (capacity.SHOWN), and one to tell "and N more"


def shape_of(pod: PodView) -> Shape:
    """What decides where a pod may land, as a key: its nodeSelector, required affinity, tolerations."""
    affinity = json.dumps(pod.affinity, sort_keys=True, default=str) if pod.affinity else ""
    return tuple(sorted(pod.node_selector.items())), affinity, pod.tolerations


def _read_keys(pod: PodView) -> tuple[tuple[str, ...], bool]:
    """The node labels a pod's placement reads, and whether it reads the node's name (matchFields).
    Anything unreadable in its affinity reads the name too: every node is then judged on its own."""
    keys, by_name = set(pod.node_selector), False
    terms: Any = pod.affinity
    for key in ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"):
        terms = terms.get(key) if isinstance(terms, Mapping) else None
    for term in terms if isinstance(terms, list) else []:
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        if not isinstance(exprs, list | None) or not all(isinstance(e, Mapping) for e in exprs or []):
            return (), True
        keys.update(str(e.get("key", "")) for e in exprs or [])
        by_name = by_name or bool(term.get("matchFields"))
    return tuple(sorted(keys)), by_name


def _available(node: NodeView) -> bool:
    return bool(node.allocatable) and node.ready and not node.unschedulable


@dataclass
class RoomMemo:
    """Each node's free room as the last judging pass worked it out, kept by the controller
    (`capacity.room_by_node`): the nodes in order, their views and pod lists, and their room."""

    names: list[str] = field(default_factory=list)
    known: frozenset[str] = frozenset()  # the same names
    views: list[NodeView] = field(default_factory=list)
    pods: list[Sequence[PodView]] = field(default_factory=list)
    room: dict[str, dict[str, int]] = field(default_factory=dict)


class Room:
    """See the module docstring. `room`: each node's free resources (`capacity.room_by_node`)."""

    def __init__(self, nodes: Mapping[str, NodeView], room: Mapping[str, Mapping[str, int]]) -> None:
        self.nodes, self.room = nodes, room
        self.available = [n for n in sorted(nodes) if _available(nodes[n])]
        self._available = set(self.available)
        self._by_room: dict[str, list[str]] = {}  # resource -> available nodes with room, most first
        self._holders: dict[str, list[str]] = {}  # resource -> the same, by name
        self._holding: dict[str, set[str]] = {}
        self._total: dict[str, int] = {}
        self._down: dict[tuple[str, ...], tuple[list[str], set[str]]] = {}  # unavailable nodes with them
        self._eligible: dict[Shape, tuple[set[str], list[str]]] = {}
        self._judge: dict[Shape, PodView] = {}  # a pod of each shape, to judge a node that changes
        self._shape_order: dict[tuple[Shape, str], list[str]] = {}

    # ----- built once, per resource and per shape --------------------------------------------------

    def _resource(self, resource: str) -> list[str]:
        if resource not in self._by_room:
            holders = [n for n in self.available if self.room.get(n, {}).get(resource, 0) > 0]
            self._holders[resource], self._holding[resource] = holders, set(holders)
            self._total[resource] = sum(self.room[n][resource] for n in holders)
            self._by_room[resource] = sorted(holders, key=lambda n: (-self.room[n][resource], n))
        return self._by_room[resource]

    def _eligible_of(self, pod: PodView, shape: Shape) -> tuple[set[str], list[str]]:
        """The available nodes `pod` may land on (a set, and by name), judged once per class of alike nodes."""
        if shape not in self._eligible:
            keys, by_name = _read_keys(pod)
            verdicts: dict[Any, bool] = {}
            found = []
            for name in self.available:
                node = self.nodes[name]
                cls = (tuple(node.labels.get(k) for k in keys), name if by_name else None, node.taints)
                if cls not in verdicts:
                    verdicts[cls] = may_land(
                        pod.node_selector, pod.affinity, pod.tolerations, node.labels, name, node.taints
                    )
                if verdicts[cls]:
                    found.append(name)
            self._eligible[shape], self._judge[shape] = (set(found), found), pod
        return self._eligible[shape]

    def _shape_by_room(self, pod: PodView, shape: Shape, resource: str) -> list[str]:
        key = (shape, resource)
        if key not in self._shape_order:
            eligible, _ = self._eligible_of(pod, shape)
            self._shape_order[key] = [n for n in self._resource(resource) if n in eligible]
        return self._shape_order[key]

    # ----- kept between passes --------------------------------------------------------------------

    def update(
        self, nodes: Mapping[str, NodeView], room: Mapping[str, Mapping[str, int]], changed: Collection[str]
    ) -> None:
        """The model of `nodes` and `room`, where only the `changed` nodes (came, went, or a new view or
        new pods) differ from what it holds. All are taken out by the old room, then put back by the new."""
        changed = set(changed)
        for name in changed:
            self._take_out(name)
        self.nodes, self.room = nodes, room
        self._down.clear()
        for name in sorted(changed):
            if name in nodes and _available(nodes[name]):
                self._put_back(name)

    def _by_room_key(self, resource: str) -> Callable[[str], tuple[int, str]]:
        room = self.room
        return lambda n: (-room[n][resource], n)

    def _take_out(self, name: str) -> None:
        if name not in self._available:
            return
        for (shape, resource), order in self._shape_order.items():
            if name in self._eligible[shape][0] and name in self._holding[resource]:
                _remove(order, name, self._by_room_key(resource))
        for eligible, by_name in self._eligible.values():
            if name in eligible:
                eligible.discard(name)
                by_name.pop(bisect_left(by_name, name))
        for resource, order in self._by_room.items():
            if name in self._holding[resource]:
                _remove(order, name, self._by_room_key(resource))
                self._holders[resource].pop(bisect_left(self._holders[resource], name))
                self._holding[resource].discard(name)
                self._total[resource] -= self.room[name][resource]
        self._available.discard(name)
        self.available.pop(bisect_left(self.available, name))

    def _put_back(self, name: str) -> None:
        node, have = self.nodes[name], self.room.get(name, {})
        insort(self.available, name)
        self._available.add(name)
        for resource, order in self._by_room.items():
            if have.get(resource, 0) > 0:
                insort(order, name, key=self._by_room_key(resource))
                insort(self._holders[resource], name)
                self._holding[resource].add(name)
                self._total[resource] += have[resource]
        for shape, (eligible, by_name) in self._eligible.items():
            pod = self._judge[shape]
            if may_land(pod.node_selector, pod.affinity, pod.tolerations, node.labels, name, node.taints):
                eligible.add(name)
                insort(by_name, name)
        for (shape, resource), order in self._shape_order.items():
            if name in self._eligible[shape][0] and name in self._holding[resource]:
                insort(order, name, key=self._by_room_key(resource))

    # ----- one node judged -------------------------------------------------------------------------

    def place(self, moving: Sequence[PodView], excluded: Collection[str]) -> list[PodView]:
        """Place `moving` in order, each on the node it may land on with the most room left for what it
        requests (ties by name), none on `excluded`; the pods that find no room."""
        left: dict[str, dict[str, int]] = {}  # nodes given pods in this judgement: what they have left
        pending = []
        for pod in moving:
            shape = shape_of(pod)
            if len(pod.gpu_requests) == 1:
                best = self._best_of_one(pod, shape, excluded, left)
            else:
                best = self._best_by_scan(pod, shape, excluded, left)
            if best is None:
                pending.append(pod)
                continue
            have = left.setdefault(best, dict(self.room[best]))
            for r, amount in pod.gpu_requests.items():
                have[r] -= amount
        return pending

    def _best_of_one(
        self, pod: PodView, shape: Shape, excluded: Collection[str], left: Mapping[str, Mapping[str, int]]
    ) -> str | None:
        ((resource, amount),) = pod.gpu_requests.items()
        candidates: list[tuple[int, str]] = []
        for name in self._shape_by_room(pod, shape, resource):  # the untouched node with the most room
            if name not in excluded and name not in left:
                candidates.append((-self.room[name][resource], name))
                break
        eligible, _ = self._eligible_of(pod, shape)
        for name, have in left.items():  # or one given pods already, with what it has left
            if name in eligible:
                candidates.append((-have.get(resource, 0), name))
        fits = [c for c in candidates if -c[0] >= amount]
        return min(fits)[1] if fits else None

    def _best_by_scan(
        self, pod: PodView, shape: Shape, excluded: Collection[str], left: Mapping[str, Mapping[str, int]]
    ) -> str | None:
        fits = []
        for name in self._eligible_of(pod, shape)[1]:
            have = left.get(name) or self.room.get(name, {})
            if name not in excluded and all(have.get(r, 0) >= a for r, a in pod.gpu_requests.items()):
                fits.append((-sum(have.get(r, 0) for r in pod.gpu_requests), name))
        return min(fits)[1] if fits else None

    # ----- what a shortage's message says ----------------------------------------------------------

    def free(self, resource: str, excluded: Collection[str]) -> tuple[int, list[str], int]:
        """On the available nodes but `excluded`: (free in total, the first holders by name as "name
        room", how many hold some)."""
        self._resource(resource)
        holders, holding = self._holders[resource], self._holding[resource]
        gone = [n for n in set(excluded) if n in holding]
        total = self._total[resource] - sum(self.room[n][resource] for n in gone)
        first = itertools.islice((f"{n} {self.room[n][resource]}" for n in holders if n not in excluded), FIRST)
        return total, list(first), len(holders) - len(gone)

    def unavailable(
        self, node: str, wanted: Collection[str], together: Collection[str], together_why: str
    ) -> tuple[list[str], int]:
        """Among the other nodes with a wanted resource, those unavailable (cordoned, not Ready, or in
        `together` for `together_why`): (the first by name as "name (why)", how many)."""
        down, down_set = self._unavailable_with(tuple(sorted(wanted)))
        others = sorted(
            n for n in set(together)
            if n != node and n not in down_set and any(self.nodes[n].allocatable.get(r, 0) > 0 for r in wanted)
        )
        names = (n for n in heapq.merge(down, others) if n != node)
        first = [f"{n} ({self._why(n, together, together_why)})" for n in itertools.islice(names, FIRST)]
        return first, len(down) - (node in down_set) + len(others)

    def _unavailable_with(self, wanted: tuple[str, ...]) -> tuple[list[str], set[str]]:
        if wanted not in self._down:
            names = [n for n in sorted(self.nodes) if n not in self._available
                     and any(self.nodes[n].allocatable.get(r, 0) > 0 for r in wanted)]
            self._down[wanted] = (names, set(names))
        return self._down[wanted]

    def _why(self, name: str, together: Collection[str], together_why: str) -> str:
        node = self.nodes[name]
        if node.unschedulable:
            return "cordoned"
        if not node.ready:
            return "not Ready"
        return together_why


def _remove(order: list[str], name: str, key: Callable[[str], tuple[int, str]]) -> None:
    """Take `name` out of `order`, sorted by `key` (as the room was when it went in)."""
    at = bisect_left(order, key(name), key=key)
    if at < len(order) and order[at] == name:
        order.pop(at)
        return
    order.remove(name)  # never expected: the order and the room it was sorted by disagree
