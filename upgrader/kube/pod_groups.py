"""Driver pods per node, kept from pass to pass and updated from what the copy says changed.

Grouping 15,000 driver pods by node anew every pass was a sixth of a pass's CPU at 15,000 nodes
(bench/README.md), although between two passes hardly a driver pod changes. The watch-fed copy
tells which pods changed since the grouping last read it (`Informer.read`); only their nodes' lists
are built again, every other node keeps its very list (which is also what lets the carried node
facts, core/node/facts.py, see at a glance that the node's pods did not change, and what keeps
per-pass garbage from setting the cyclic collector scanning the heap).

Each node's pods are ordered by key, so the grouping does not depend on the order events came in:
updated or built whole, it is the same (tests/kube/test_pod_groups.py). Lists are never changed in
place once handed out; a pass replaces the lists of nodes it reads afresh in its own copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import is_

from upgrader.core.model.views import PodView
from upgrader.kube.informer import Entry


def _by_key(pod: PodView) -> str:
    return pod.key


class PodsByNode:
    def __init__(self) -> None:
        self._groups: dict[str, list[PodView]] = {}
        self._node_of: dict[str, str] = {}  # pod key -> its node, to find the list a gone pod left
        self._follows_copy = False  # the groups are the copy's as of its last `read`
        # Keys of the pods that hold a ResourceClaim: a pass asks whether any does, without a walk
        # over every pod (read_gpu_claims LISTs claims only then).
        self.claiming: set[str] = set()

    def group(
        self, entries: Mapping[str, Entry[PodView]], changed: set[str] | None, from_copy: bool
    ) -> dict[str, list[PodView]]:
        """The pods of `entries` by node (a new dict; its lists are shared with the next pass's).
        `changed`: the keys changed since the copy was last read, None when unknown (a LIST, or the
        copy replaced whole). `from_copy`: `entries` is the copy itself, as `changed` describes it.
        Many changes (a DaemonSet rolling every driver pod) are grouped whole: it is cheaper."""
        if changed is None or not (from_copy and self._follows_copy) or 4 * len(changed) > len(entries):
            self._regroup(entries)
        else:
            self._update(entries, changed)
        self._follows_copy = from_copy
        return dict(self._groups)

    def _regroup(self, entries: Mapping[str, Entry[PodView]]) -> None:
        grouped: dict[str, list[PodView]] = {}
        node_of: dict[str, str] = {}
        for key, entry in entries.items():
            pod = entry.view
            grouped.setdefault(pod.node, []).append(pod)
            node_of[key] = pod.node
        self.claiming = {key for key, entry in entries.items() if entry.view.claims}
        for node, pods in grouped.items():
            if len(pods) > 1:
                pods.sort(key=_by_key)
            old = self._groups.get(node)
            if old is not None and len(old) == len(pods) and all(map(is_, old, pods)):
                grouped[node] = old
        self._groups, self._node_of = grouped, node_of

    def _update(self, entries: Mapping[str, Entry[PodView]], changed: set[str]) -> None:
        arrived: dict[str, list[PodView]] = {}  # node -> its changed pods that are still there
        for key in changed:
            was = self._node_of.pop(key, None)
            if was is not None:
                arrived.setdefault(was, [])
            entry = entries.get(key)
            self.claiming.discard(key)
            if entry is not None:
                if entry.view.claims:
                    self.claiming.add(key)
                self._node_of[key] = entry.view.node
                arrived.setdefault(entry.view.node, []).append(entry.view)
        for node, pods in arrived.items():
            kept = [p for p in self._groups.get(node, ()) if p.key not in changed] + pods
            if kept:
                kept.sort(key=_by_key)
                self._groups[node] = kept
            else:
                self._groups.pop(node, None)
