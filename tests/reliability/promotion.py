"""Pools and their promotions in the campaigns: each pool's nodes and policy as the controller splits
the fleet, and a person who promotes a pool whenever its status awaits it, whose promotions the
audit holds every start past a canary stage to."""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from upgrader.core.model.selectors import parse_label_selector as parse_selector
from upgrader.core.model.states import State
from upgrader.core.policy.parts import FailureDomains
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.proving.recording import NodeRecord


def pool_parts(policy: Policy, cluster: EmulatedCluster, nodes: list[str]) -> list[tuple[str, Policy, list[str]]]:
    """Each pool's name, policy and nodes, as the controller splits the fleet (core/fleet/pool_shares.py); without
    pools, the whole fleet under the policy."""
    if not policy.pools:
        return [("", policy, list(nodes))]
    from upgrader.core.policy.pool_policy import DEFAULT_POOL

    labels = {n: ((cluster.get("nodes", n) or {}).get("metadata") or {}).get("labels") or {} for n in nodes}
    parts: dict[str, list[str]] = {}
    for node in nodes:
        pool = next((p.name for p in policy.pools if parse_selector(p.node_selector).matches(labels[node])),
                    DEFAULT_POOL)
        parts.setdefault(pool, []).append(node)
    by_name = {p.name: p for p in policy.pools}
    return [(name, policy.for_pool(by_name.get(name)), members) for name, members in parts.items()]


class Promoter:
    """A person at `upgrader promote --pool NAME` (the real CLI, in process): whenever a pool's status
    waits on a promotion, they promote it. Remembers when (the cluster's clock), so the audit can tell
    that nothing past a gate started before its promotion."""

    def __init__(self, kubeconfig: Path, rollout: str) -> None:
        self.kubeconfig = kubeconfig
        self.rollout = rollout  # the DriverRollout promoted
        self.promoted: list[tuple[float, str, str]] = []  # when, pool, stage
        self.refusals = 0

    def start(self, w: Any) -> None:
        threading.Thread(target=self._run, args=(w,), daemon=True, name="promoter").start()

    def _run(self, w: Any) -> None:
        from upgrader.commands.cli import main

        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and w.phase() != "Done":
            for pool in w.status().get("pools") or []:
                wait = pool.get("waiting_on") or {}
                if wait.get("reason") != "awaiting-promotion":
                    continue
                stage = str(wait.get("stage"))
                last = max((t for t, _, s in self.promoted if s == stage), default=None)
                if last is not None and w.cluster.store.clock.now() - last < 2.0:
                    continue  # promoted a moment ago: the next pass goes on (a restore may take it back)
                argv = ["promote", "--kubeconfig", str(self.kubeconfig), "--rollout", self.rollout,
                        "--pool", pool["name"]]
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    code = main(argv)
                if code == 0:
                    self.promoted.append((w.cluster.store.clock.now(), str(pool["name"]), stage))
                else:
                    self.refusals += 1  # an API fault, or the wait ended meanwhile: asked again next round
            time.sleep(0.2)

    def violations(self, w: Any) -> list[str]:
        """Each pool's rest of its canary domain started (by upgrader) only after its canary nodes were
        promoted. Judged by the zones each start saw, as the controller judges it: a node relabelled
        out of the canary domain is no longer of it, and a domain left with no more nodes than its
        canaryNodes is the canary whole (FailureDomains.canary_count), with no such stage to promote."""
        found = []
        for name, own, nodes in pool_parts(policy_from_mapping(w.spec), w.cluster, w.info.nodes):
            if own.promotion_gate.value == "none":
                continue
            stage = f"{name}:{own.failure_domains.canary}/canaryNodes"
            when = min((t for t, _, s in self.promoted if s == stage), default=None)
            past = past_canary_nodes(w.recorder.records, set(nodes), own.failure_domains)
            if past and when is None:
                found.append(f"pool {name}: {past[0][1]} started, but {stage} was never promoted")
            elif past and when is not None and past[0][0] < when:
                found.append(f"pool {name}: {past[0][1]} started at {past[0][0]:.2f}, before the "
                             f"promotion of {stage} at {when:.2f}")
        return found


def past_canary_nodes(
    records: Iterable[NodeRecord], pool: set[str], domains: FailureDomains
) -> list[tuple[float, str]]:
    """upgrader's starts, in the canary domain as the start saw it, of a node that is not one of its canary
    nodes: the domain's first `canaryNodes` to start (a canary node started again, after a restore, is
    one still). A person's, another controller's or a restore's move out of upgrade-required is not a start."""
    zone: dict[str, str | None] = {}
    state: dict[str, str | None] = {}
    started: set[str] = set()  # nodes of the canary domain upgrader started
    past = []
    for r in records:
        was, zone[r.node], state[r.node] = state.get(r.node), r.zone, r.state
        start = was == State.UPGRADE_REQUIRED.value and r.state == State.CORDON_REQUIRED.value and r.by is None
        if not start or r.node not in pool or r.zone != domains.canary:
            continue
        members = {n for n in pool if zone.get(n) == domains.canary}
        count = domains.canary_count(len(members))
        if count is not None and r.node not in started and len(started & members) >= count:
            past.append((r.time, r.node))
        started.add(r.node)
    return past
