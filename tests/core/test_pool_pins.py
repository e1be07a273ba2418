"""Which pool a node counts in (docs/policy.md#a-node-counts-where-it-started): a node in progress or failed
stays in the pool that started it while that pool is in the spec; one without a record, or whose pool left the
spec, counts where its labels put it and is pinned there; a node at upgrade-required or done goes by its labels."""

from __future__ import annotations

from upgrader.core.fleet.managed import fleet
from upgrader.core.fleet.pool_shares import pins, shares
from upgrader.core.model.actions import Annotate
from upgrader.core.model.states import STARTED_POOL, State

from .factories import node, policy, snapshot

POOLS = [{"name": "training", "nodeSelector": "pool=training"}, {"name": "inference", "nodeSelector": "pool=inference"}]


def members(snap, pol) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    return {s.name: sorted(n.name for n in s.managed) for s in shares(snap, pol, fleet(snap))}


def test_a_started_node_counts_where_it_started_and_the_rest_by_labels() -> None:
    pol = policy(pools=POOLS)
    moved = node("moved", State.DRAIN_REQUIRED, labels={"pool": "inference"}, annotations={STARTED_POOL: "training"})
    failed = node("failed", State.FAILED, labels={"pool": "inference"}, annotations={STARTED_POOL: "training"})
    back = node("back", State.UPGRADE_REQUIRED, labels={"pool": "inference"}, annotations={STARTED_POOL: "training"})
    done = node("done", State.DONE, labels={"pool": "inference"})
    snap = snapshot([moved, failed, back, done])
    assert members(snap, pol) == {"training": ["failed", "moved"], "inference": ["back", "done"]}
    assert pins(shares(snap, pol, fleet(snap))) == []


def test_a_node_in_progress_without_a_record_or_whose_pool_left_the_spec_is_pinned_where_it_counts_now() -> None:
    pol = policy(pools=POOLS)
    unrecorded = node("unrecorded", State.CORDON_REQUIRED, labels={"pool": "inference"})
    orphan = node("orphan", State.POD_RESTART_REQUIRED, labels={"pool": "training"}, annotations={STARTED_POOL: "gone"})
    idle = node("idle", State.UPGRADE_REQUIRED, labels={"pool": "training"})
    snap = snapshot([unrecorded, orphan, idle])
    assert members(snap, pol) == {"training": ["idle", "orphan"], "inference": ["unrecorded"]}
    assert pins(shares(snap, pol, fleet(snap))) == [
        Annotate("orphan", {STARTED_POOL: "training"}), Annotate("unrecorded", {STARTED_POOL: "inference"})]
