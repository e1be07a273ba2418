"""The ETA from the observed per-node durations: median, waves of maxParallelUpgrades, a soak per
domain to come, anchored on the newest state change (so it moves only when a node does)."""

from __future__ import annotations

from dataclasses import replace

from upgrader.core.model.states import STARTED_AT
from upgrader.core.report.entries import Eta
from upgrader.core.rollout.status import estimate

from .factories import at, node
from .schedule_fixtures import DONE, REQ, S


def test_median_waves_and_soaks_from_the_newest_change() -> None:
    nodes = [
        node("a1", DONE, since=100, annotations={STARTED_AT: at(0)}),  # 100 s
        node("a2", DONE, since=400, annotations={STARTED_AT: at(100)}),  # 300 s
        node("a3", DONE, since=700, annotations={STARTED_AT: at(500)}),  # 200 s
        node("b1", S.DRAIN_REQUIRED, since=650), *(node(f"b{i}", REQ, since=0) for i in range(2, 6)),
    ]
    got = estimate(nodes, max_parallel_upgrades=2, soak_seconds=600, domains_left=1)
    # 5 left, 2 at a time: 3 waves of the 200 s median, and one soak; from the newest change, T0+700
    assert got == Eta(at(700 + 3 * 200 + 600), node_seconds=200, from_nodes=3, nodes_left=5)
    assert estimate(nodes, 2, 0, 0) == replace(got, at=at(700 + 3 * 200))


def test_no_estimate_before_a_node_finished_or_when_none_is_left() -> None:
    assert estimate([node("a1", REQ, since=0)], 1, 0, 0) is None
    assert estimate([node("a1", DONE, since=100, annotations={STARTED_AT: at(0)})], 1, 0, 0) is None
