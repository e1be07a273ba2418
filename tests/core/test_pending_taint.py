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


# Only our own taint (docs/policy.md#only-our-taint): our key with another effect or value is someone else's.
THEIRS_NOEXECUTE = Taint(pt.KEY, "", "NoExecute")
THEIRS_VALUED = Taint(pt.KEY, "maintenance", "PreferNoSchedule")


def test_a_taint_with_our_key_and_another_effect_or_value_is_never_removed() -> None:
    nodes = [replace(node("a1", DONE), taints=(THEIRS_NOEXECUTE,)), replace(node("a2", DONE), taints=(THEIRS_VALUED,)),
             replace(node("a3", REQ), taints=(THEIRS_NOEXECUTE, OTHER))]
    assert writes(nodes, TaintPendingNodes(enable=False)) == {}
    assert writes(nodes, phase="Done") == {}
    # A pending node gets ours beside another's NoExecute with our key; one with another's PreferNoSchedule
    # under our key is left as it is (one taint per key and effect: it steers as ours would).
    assert writes(nodes) == {"a3": (THEIRS_NOEXECUTE, OTHER, pt.OURS)}
    assert writes([replace(node("a4", REQ), taints=(THEIRS_VALUED,))]) == {}


def test_a_node_outside_the_fleet_keeps_every_taint_but_ours_exactly() -> None:
    outside = [replace(node("cpu-1", None), taints=(pt.LEGACY,)), replace(node("cpu-2", None), taints=(pt.OURS, OTHER))]
    assert writes([], bystanders=outside) == {"cpu-2": (OTHER,)}


def test_the_taint_an_earlier_upgrader_wrote_is_ours_on_a_fleet_node_and_takes_our_value() -> None:
    nodes = [replace(node("a1", REQ), taints=(OTHER, pt.LEGACY)), replace(node("a2", DONE), taints=(pt.LEGACY,))]
    assert writes(nodes) == {"a1": (OTHER, pt.OURS), "a2": ()}
    assert writes([], bystanders=[replace(node("x1", REQ), taints=(pt.LEGACY,))]) == {"x1": ()}
