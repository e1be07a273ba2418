"""Pools side by side (policy `pools`, docs/policy.md#pools): which pool each node is in, the policy
it starts under; their statuses side by side are core/report/pooled.py's.

A node is in the first pool that selects it (by label selector, by the driver DaemonSet that runs
or would run on it, or by the NVIDIADriver owning that DaemonSet); the nodes no pool selects are
the pool `default`, under the policy's own keys. A node in progress or failed stays in the pool that
started it (its `started-pool` record) while that pool is in the spec, whatever its labels or the pools'
order become, so a move never frees a slot of the pool that started it
(docs/policy.md#a-node-counts-where-it-started). Each pool has its own schedule (budgets, failure
domains, canary, windows, promotion gate) and its own phase: a halt in one stops only that one
unless `haltAcrossPools` is set. The pause, the alert gate, the interlocks and every node's steps
are the whole rollout's. A pool's stages are named `<pool>:<stage>` (core/rollout/stages.py), so two pools
with the same zones are promoted apart."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from upgrader.core.fleet.managed import Fleet
from upgrader.core.model.actions import Action, Annotate
from upgrader.core.model.findings import WARNING, Finding
from upgrader.core.model.selectors import LabelSelector, parse_label_selector
from upgrader.core.model.states import IN_PROGRESS, STARTED_POOL, State
from upgrader.core.model.views import DriverSet, NodeView, Snapshot
from upgrader.core.node.context import driver_set_for
from upgrader.core.policy.policy import Policy
from upgrader.core.policy.pool_policy import DEFAULT_POOL, Pool


@dataclass(frozen=True)
class Share:
    """One pool's part of the fleet, and the policy its nodes start under."""

    name: str
    policy: Policy
    managed: list[NodeView]
    skipped: list[str]
    invalid: list[tuple[str, str]]
    selects: str  # how the pool picks its nodes, in the policy's words

    @property
    def stage_prefix(self) -> str:
        return f"{self.name}:"


def shares(snapshot: Snapshot, policy: Policy, split: Fleet) -> list[Share]:
    """The pools in the policy's order, then `default` when some node is in no pool; a pool no node
    is in is listed all the same (the status says it has 0 nodes)."""
    pool_of = membership(snapshot, policy.pools)
    managed: dict[str, list[NodeView]] = {}
    skipped: dict[str, list[str]] = {}
    invalid: dict[str, list[tuple[str, str]]] = {}
    for node in split.managed:
        managed.setdefault(pool_of(node), []).append(node)
    for name in split.skipped:
        skipped.setdefault(pool_of(snapshot.nodes[name]), []).append(name)
    for name, why in split.invalid:
        invalid.setdefault(pool_of(snapshot.nodes[name]), []).append((name, why))
    out = [
        Share(p.name, policy.for_pool(p), managed.get(p.name, []), skipped.get(p.name, []),
              invalid.get(p.name, []), _selects(p))
        for p in policy.pools
    ]
    if DEFAULT_POOL in managed or DEFAULT_POOL in skipped or DEFAULT_POOL in invalid:
        out.append(Share(DEFAULT_POOL, policy.for_pool(None), managed.get(DEFAULT_POOL, []),
                         skipped.get(DEFAULT_POOL, []), invalid.get(DEFAULT_POOL, []), "the nodes no pool selects"))
    return out


def membership(snapshot: Snapshot, pools: Sequence[Pool]) -> Callable[[NodeView], str]:
    """`pool_of(node)`: the pool a node counts in this pass."""
    selectors = {p.name: parse_label_selector(p.node_selector) for p in pools if p.node_selector is not None}
    named = {p.name for p in pools} | {DEFAULT_POOL}

    @cache
    def driver_set(name: str) -> DriverSet | None:
        return driver_set_for(snapshot, name)

    def pool_of(node: NodeView) -> str:
        started = started_pool(node)
        if started in named:
            return started
        for pool in pools:
            if _selected(pool, node, selectors.get(pool.name), driver_set):
                return pool.name
        return DEFAULT_POOL

    return pool_of


def started_pool(node: NodeView) -> str | None:
    """The pool that started a node still in progress or failed; None once it left them (or never had one)."""
    if node.state in IN_PROGRESS or node.state is State.FAILED:
        return node.annotations.get(STARTED_POOL)
    return None


def pins(parts: Sequence[Share]) -> list[Action]:
    """The `started-pool` records to write: a node in progress or failed without one naming its pool (adopted
    from another controller, started by an earlier version, or its pool gone from the spec) is pinned to the
    pool it counts in now, so a later move or reorder cannot free that pool's slot."""
    return [
        Annotate(node.name, {STARTED_POOL: share.name})
        for share in parts
        for node in share.managed
        if (node.state in IN_PROGRESS or node.state is State.FAILED) and started_pool(node) != share.name
    ]


def _selected(pool: Pool, node: NodeView, selector: LabelSelector | None, driver_set: Any) -> bool:
    if selector is not None:
        return selector.matches(node.labels)
    ds = driver_set(node.name)
    if ds is None:
        return False
    if pool.driver_daemon_set is not None:
        return pool.driver_daemon_set in (ds.name, f"{ds.namespace}/{ds.name}")
    return ds.owner == ("NVIDIADriver", pool.nvidia_driver)


def _selects(pool: Pool) -> str:
    if pool.node_selector is not None:
        return f"nodeSelector {pool.node_selector}"
    if pool.driver_daemon_set is not None:
        return f"driverDaemonSet {pool.driver_daemon_set}"
    return f"nvidiaDriver {pool.nvidia_driver}"


def empty_findings(parts: Sequence[Share], policy: Policy) -> list[Finding]:
    """`plan` warns of a pool that selects no managed node: a selector with a typo would otherwise
    leave its nodes to the pool default, under the policy's own budgets, in silence."""
    named = {p.name for p in policy.pools}
    return [
        Finding("empty-pool", WARNING, None,
                f"pool {s.name} ({s.selects}) selects no managed GPU node; nodes no pool selects are in pool "
                f"{DEFAULT_POOL}, under the policy's own budgets")
        for s in parts if s.name in named and not s.managed
    ]
