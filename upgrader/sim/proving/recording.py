"""What a rollout's recorder keeps: every node change and mark in commit order (`HistoryRecorder`), what
whoever disturbs the rollout tells it, and the facts derived from that history and the request log."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from upgrader.core.model.states import BLOCKED_KIND, State
from upgrader.core.policy.policy import Policy
from upgrader.core.policy.rollout_object import GROUP as ROLLOUT_GROUP
from upgrader.core.policy.rollout_object import PLURAL as ROLLOUT_PLURAL
from upgrader.core.policy.rollout_object import VERSION as ROLLOUT_VERSION
from upgrader.core.policy.rollout_object import read_intent
from upgrader.kube.snapshot import ACKNOWLEDGED_KEY, parse_acknowledged
from upgrader.sim.apiserver.watch import Change
from upgrader.sim.cluster import EmulatedCluster

LABEL = "nvidia.com/gpu-driver-upgrade-state"
ZONE_LABEL = "topology.kubernetes.io/zone"
NO_DOMAIN = "<none>"
RESTORE = "restore"  # `by` of the records a restored API server brings back



def domain_order(present: Collection[str], policy: Policy) -> list[str]:
    """Domains present, in the order of `policy`: `order` first, the rest sorted, nodes without the
    label (NO_DOMAIN) last, the canary (default: the first in `order`) leading. The judges' own
    reading of docs/policy.md, apart from the scheduler they judge (core/rollout/schedule.py)."""
    fd = policy.failure_domains
    sequence = [d for d in fd.order if d in present]
    sequence += sorted(d for d in present if d not in sequence and d != NO_DOMAIN)
    if NO_DOMAIN in present:
        sequence.append(NO_DOMAIN)
    if fd.canary in sequence:
        sequence.remove(fd.canary)
        sequence.insert(0, fd.canary)
    return sequence

@dataclass(frozen=True)
class NodeRecord:
    rv: int
    time: float
    node: str
    state: str | None
    unschedulable: bool
    blocked: bool
    annotations: dict[str, str]
    zone: str | None = None
    seq: int = 0  # place in the recorder's history: resourceVersions go back on a restore
    by: str | None = None  # who else wrote it: a person (`by_hand`), or RESTORE; None: upgrader


@dataclass(frozen=True)
class Mark:
    """A moment in the history besides a node change: a controller's pass begins ("pass"), the status
    names its current domain ("status"), a backup is taken ("backup"), the API server comes back on a
    backup ("restore", `token` the backup's seq), a controller with `policy` takes over ("policy"),
    the operators' intent changes ("control": `paused`, and the failures `acknowledged`, node ->
    failed-at as the control ConfigMap holds them)."""

    seq: int
    time: float
    kind: str
    domain: str | None = None
    token: int = 0
    policy: Policy | None = None
    by: str | None = None
    paused: bool = False
    acknowledged: tuple[tuple[str, str], ...] = ()
    pools: tuple[tuple[str, str | None], ...] = ()  # "status" with policy pools: each pool's current domain


class HistoryRecorder:
    """Hooks the store and keeps the history that `RolloutRecorder` judges (see invariants.py)."""

    def __init__(
        self,
        cluster: EmulatedCluster,
        status: tuple[str, str] | None = None,
        control: tuple[str, str] | None = None,
        rollout: str | None = None,
    ) -> None:
        """`status`: (namespace, name) of the status ConfigMap whose current domain to follow;
        `control`: of the control ConfigMap whose pause and acknowledgements to follow; `rollout`:
        the DriverRollout whose spec (pause, acknowledgements) and status to follow instead."""
        self.cluster = cluster
        self.control = control
        self.rollout = rollout
        self.records: list[NodeRecord] = []
        self.marks: list[Mark] = []
        self.initially_cordoned: set[str] = set()
        self.status = status
        self._seq = itertools.count(1)
        self._by: str | None = None
        self._status_domain: str | None = None
        self._status_pools: tuple[tuple[str, str | None], ...] = ()
        nodes = cluster.type("nodes")
        for node in cluster.store.objects(nodes):
            self._record(node, cluster.store.resource_version)
            if (node.get("spec") or {}).get("unschedulable"):
                self.initially_cordoned.add(node["metadata"]["name"])
        cluster.store.reactors.append(self._react)

    def _react(self, change: Change) -> None:
        if change.key == ("", "nodes") and change.type != "DELETED":
            by = self._by
            if by != RESTORE:  # only a person's write itself, not what it sets off
                self._by = None
            self._record(change.new, change.rv, by)
        elif change.key == (ROLLOUT_GROUP, ROLLOUT_PLURAL) and change.new["metadata"]["name"] == self.rollout:
            self._follow_rollout(change.old, change.new)
        elif change.key == ("", "configmaps") and change.new is not None:
            meta = change.new["metadata"]
            if (meta.get("namespace"), meta["name"]) == self.status:
                self._follow_status(change.new)
            elif (meta.get("namespace"), meta["name"]) == self.control and change.type != "DELETED":
                # Only people and the CLI write it; a deleted one changes nothing: the controller keeps
                # the pause the last status recorded (docs/operations.md).
                self._follow_control(change.new, self._by or "cli")

    def _record(self, node: dict[str, Any], rv: int, by: str | None = None) -> None:
        meta = node["metadata"]
        annotations = dict(meta.get("annotations") or {})
        labels = meta.get("labels") or {}
        self.records.append(
            NodeRecord(
                rv=rv,
                time=self.cluster.store.clock.now(),
                node=meta["name"],
                state=labels.get(LABEL),
                unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
                blocked=bool(annotations.get(BLOCKED_KIND)),
                annotations=annotations,
                zone=labels.get(ZONE_LABEL),
                seq=next(self._seq),
                by=by,
            )
        )

    def _follow_status(self, configmap: dict[str, Any] | None, by: str | None = None) -> None:
        try:
            status = json.loads(((configmap or {}).get("data") or {}).get("status.json") or "{}")
        except ValueError:
            status = {}
        domain = status.get("current_domain") if isinstance(status, dict) else None
        entries = status.get("pools") if isinstance(status, dict) else None
        pools = tuple((str(p.get("name")), p.get("current_domain")) for p in entries or () if isinstance(p, dict))
        if (domain, pools) != (self._status_domain, self._status_pools) or by is not None:
            self._status_domain, self._status_pools = domain, pools
            self._mark("status", domain=domain, by=by, pools=pools)

    def _follow_rollout(self, old: dict[str, Any] | None, new: dict[str, Any], by: str | None = None) -> None:
        """The object's spec is the control ConfigMap's intent, its status.report the status's."""
        if change_of(old, new, "status") or by is not None:
            report = (new.get("status") or {}).get("report") or {}
            # A person's write of the status subresource (`by_hand`: its status wiped) or a restore's is
            # theirs, not the controller's move: a pass that began before it is judged without it.
            self._follow_status({"data": {"status.json": json.dumps(report)}}, by or self._by)
        if change_of(old, new, "spec") or by is not None:
            intent = read_intent(new["metadata"]["name"], new)
            pairs = tuple(sorted(intent.acknowledged.items()))
            self._mark("control", paused=intent.paused, acknowledged=pairs, by=by or self._by or "cli")

    def _follow_control(self, configmap: dict[str, Any] | None, by: str) -> None:
        data = (configmap or {}).get("data") or {}
        pairs = tuple(sorted(parse_acknowledged(data.get(ACKNOWLEDGED_KEY)).items()))  # as the controller reads it
        self._mark("control", paused=data.get("paused") == "true", acknowledged=pairs, by=by)

    def _mark(self, kind: str, **fields: Any) -> Mark:
        with self.cluster.store.lock:  # one order with the node records, which commit under it
            mark = Mark(next(self._seq), self.cluster.store.clock.now(), kind, **fields)
            self.marks.append(mark)
            return mark

    # ----- what whoever disturbs the rollout tells the recorder -------------------------------------

    @contextlib.contextmanager
    def by_hand(self, who: str) -> Iterator[None]:
        """The node write made inside is a person's (`who`), not upgrader's."""
        with self.cluster.store.lock:
            self._by = who
            try:
                yield
            finally:
                self._by = None

    def pass_begins(self) -> None:
        """A controller pass reads the cluster now: what lands later, it decides without."""
        self._mark("pass")

    def policy_in_effect(self, policy: Policy) -> None:
        """From now on a controller with `policy` drives the rollout (its domain order)."""
        self._mark("policy", policy=policy)

    def backup_taken(self) -> int:
        """Call under the store's lock right after `cluster.backup()`; the token for `restoring`."""
        return self._mark("backup").seq

    @contextlib.contextmanager
    def restoring(self, token: int) -> Iterator[None]:
        """Around `cluster.restore_from` the backup of `token`: what it brings back (and the
        emulator's behaviours write as they resume) is the restore's, not upgrader's."""
        with self.cluster.store.lock:
            self._mark(RESTORE, token=token, by=RESTORE)
            self._by = RESTORE
            try:
                yield
                for node in self.cluster.store.objects(self.cluster.type("nodes")):
                    self._record(node, self.cluster.store.resource_version, RESTORE)
                if self.status is not None:
                    namespace, name = self.status
                    self._follow_status(self.cluster.get("configmaps", name, namespace), by=RESTORE)
                if self.control is not None:
                    namespace, name = self.control
                    self._follow_control(self.cluster.get("configmaps", name, namespace), by=RESTORE)
                if self.rollout is not None:
                    found = self.cluster.get(ROLLOUT_PLURAL, self.rollout, None, ROLLOUT_GROUP, ROLLOUT_VERSION)
                    if found is not None:
                        self._follow_rollout(None, found, by=RESTORE)
            finally:
                self._by = None

    # ----- derived facts ------------------------------------------------------------------------

    def starts(self) -> list[NodeRecord]:
        """Records where a node left upgrade-required for cordon-required."""
        last: dict[str, str | None] = {}
        out = []
        for r in self.records:
            if last.get(r.node) == State.UPGRADE_REQUIRED.value and r.state == State.CORDON_REQUIRED.value:
                out.append(r)
            last[r.node] = r.state
        return out

    def first_halt(self, within: set[str] | None = None) -> NodeRecord | None:
        """The first record where a node (of `within`, default any) was blocked or failed."""
        return next(
            (r for r in self.records
             if (r.blocked or r.state == State.FAILED.value) and (within is None or r.node in within)),
            None,
        )

    def final_states(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for r in self.records:
            out[r.node] = r.state
        return out

    def _pdb_bypass(self) -> list[str]:
        """No pod whose eviction a PDB refused was then deleted by a plain DELETE."""
        refused: set[str] = set()
        violations = []
        for req in self.cluster.requests:
            key = f"{req.namespace}/{req.name}"
            if req.subresource == "eviction" and req.status == 429:
                refused.add(key)
            elif req.verb == "delete" and req.resource == "pods" and key in refused:
                violations.append(f"request {req.seq}: pod {key} deleted after a PDB refused its eviction")
        return violations


def change_of(old: dict[str, Any] | None, new: dict[str, Any], part: str) -> bool:
    return old is None or old.get(part) != new.get(part)
