"""taintPendingNodes as plain data: our PreferNoSchedule taint on the nodes still to be upgraded while
the rollout runs, off at upgrade-done, at the end, under onPause: remove, and on any node we no longer
manage; other taints kept; removals first, the coming waves next, at most PER_PASS a pass."""

from __future__ import annotations

from dataclasses import replace

from upgrader.core.model.placement import Taint
from upgrader.core.policy.pending_taint_policy import TaintPendingNodes
from upgrader.core.rollout import pending_taint as pt

from .factories import node
from .schedule_fixtures import DONE, FAILED, REQ, S

ON = TaintPendingNodes(enable=True)
OTHER = Taint("dedicated", "gpu", "NoSchedule")


def tainted(n):  # type: ignore[no-untyped-def]
    return replace(n, taints=(OTHER, pt.OURS))


def writes(nodes, setting=ON, phase="Running", bystanders=()):  # type: ignore[no-untyped-def]
    order = {n.name: i for i, n in enumerate(nodes)}
    return {w.node: w.taints for w in pt.taint_writes(nodes, setting, phase, lambda: order, bystanders)}


def test_pending_and_in_progress_nodes_get_it_done_and_failed_ones_lose_it_others_kept() -> None:
    nodes = [replace(node("a1", REQ), taints=(OTHER,)), node("a2", S.DRAIN_REQUIRED), tainted(node("a3", DONE)),
             tainted(node("a4", FAILED)), tainted(node("a5", REQ))]
    assert writes(nodes) == {"a1": (OTHER, pt.OURS), "a2": (pt.OURS,), "a3": (OTHER,), "a4": (OTHER,)}


def test_the_end_off_and_a_pause_under_remove_take_it_off_and_keep_keeps_it() -> None:
    nodes = [tainted(node("a1", REQ)), tainted(node("a2", S.CORDON_REQUIRED))]
    removed = {"a1": (OTHER,), "a2": (OTHER,)}
    assert writes(nodes, TaintPendingNodes(enable=False)) == removed
    assert writes(nodes, TaintPendingNodes(enable=True, onPause="remove"), phase="Paused") == removed
    assert writes(nodes, ON, phase="Paused") == {}
    assert writes(nodes, ON, phase="Halted") == {}
    assert writes(nodes, ON, phase="Done") == removed


def test_a_node_no_longer_managed_loses_it() -> None:
    assert writes([], bystanders=[tainted(node("x1", REQ))]) == {"x1": (OTHER,)}


def test_removals_first_then_the_order_at_most_per_pass() -> None:
    many = [node(f"n{i:04d}", REQ) for i in range(pt.PER_PASS + 50)] + [tainted(node("z-done", DONE))]
    order = {n.name: i for i, n in enumerate(reversed(many))}
    due = pt.taint_writes(many, ON, "Running", lambda: order)
    assert len(due) == pt.PER_PASS and due[0].node == "z-done"
    assert due[1].node == f"n{pt.PER_PASS + 49:04d}", "the next in the order after the removals"
