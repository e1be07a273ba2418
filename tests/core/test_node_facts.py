"""Node facts carried between passes (core/node/facts.py): reused only while the node view and its
driver pods are the very objects they came from and the driver DaemonSets are equal; detect's quick
path leaves alone only what the long way would leave alone."""

from __future__ import annotations

from dataclasses import replace

from upgrader.core.fleet.managed import fleet
from upgrader.core.model.actions import Annotate, Transition
from upgrader.core.model.states import BLOCKED_KIND, BLOCKED_REASON, STATE_SINCE, State
from upgrader.core.model.views import Snapshot
from upgrader.core.node.facts import FactsCarry, generation_of
from upgrader.core.rollout.detect import detect
from upgrader.core.rollout.stepping import CLEAR_BLOCK

from .factories import NEW, OLD, T0, at, driver_pod, driver_set, node, policy, snapshot

S = State


def carried(snap: Snapshot, carry: FactsCarry) -> Snapshot:
    return replace(snap, carry=carry)  # a new snapshot (its own memo), the same view objects


def test_a_driver_pod_replaced_under_an_unchanged_node_is_judged_again() -> None:
    carry = FactsCarry()
    done = node(state=S.DONE, since=-60)
    first = carried(snapshot([done], [driver_pod(revision=NEW)]), carry)
    assert detect(first, policy(), T0) == []
    # The same node view, its driver pod now one at the old revision (rolled back by hand).
    second = carried(snapshot([done], [driver_pod(revision=OLD)]), carry)
    (require,) = [a for a in detect(second, policy(), T0) if isinstance(a, Transition)]
    assert (require.source, require.target) == (S.DONE, S.UPGRADE_REQUIRED)


def test_new_driver_daemonsets_forget_every_fact() -> None:
    carry = FactsCarry()
    done = node(state=S.DONE, since=-60)
    pods = [driver_pod(revision=NEW)]
    assert detect(carried(snapshot([done], pods), carry), policy(), T0) == []
    moved_on = carried(snapshot([done], pods, driver_sets=[driver_set("rev-newer", revision=3)]), carry)
    (require,) = [a for a in detect(moved_on, policy(), T0) if isinstance(a, Transition)]
    assert require.target is S.UPGRADE_REQUIRED


def test_the_split_is_kept_while_nothing_changes_and_redone_when_a_node_comes() -> None:
    carry = FactsCarry()
    one = node("n1")
    pods = [driver_pod("n1")]
    first = carried(snapshot([one], pods), carry)
    assert [n.name for n in fleet(first).managed] == ["n1"]
    counted = generation_of(first)
    again = carried(snapshot([one], pods), carry)
    assert generation_of(again) == counted
    assert fleet(again).managed[0] is one
    more = carried(snapshot([one, node("n2")], [*pods, driver_pod("n2")]), carry)
    assert generation_of(more) != counted
    assert [n.name for n in fleet(more).managed] == ["n1", "n2"]


def test_a_block_record_left_on_an_idle_node_is_cleared() -> None:
    """Not quiet: a block record from a hand relabel goes, at upgrade-required and upgrade-done alike."""
    left = {BLOCKED_KIND: "pdb", BLOCKED_REASON: "a budget refused"}
    waiting = node("n1", S.UPGRADE_REQUIRED, since=-60, annotations=left)
    done = node("n2", S.DONE, since=-60, annotations=left)
    snap = snapshot([waiting, done], [driver_pod("n1", OLD), driver_pod("n2", NEW)])
    assert [a for a in detect(snap, policy(), T0) if isinstance(a, Annotate)] == [
        Annotate("n1", CLEAR_BLOCK),
        Annotate("n2", CLEAR_BLOCK),
    ]


def test_a_clock_in_the_future_is_noticed_on_a_carried_node_as_time_goes_by() -> None:
    """The facts hold the clock as read; whether it is in our future is judged at each pass's now."""
    carry = FactsCarry()
    ahead = node(state=S.UPGRADE_REQUIRED, since=600)  # stamped 600 s ahead of T0
    pods = [driver_pod(revision=OLD)]
    restarted = [a for a in detect(carried(snapshot([ahead], pods), carry), policy(), T0) if isinstance(a, Annotate)]
    assert restarted and restarted[0].annotations[STATE_SINCE] == at(0)
    later = T0 + 700  # the same node, the same facts: its clock is in the past now
    assert detect(carried(snapshot([ahead], pods), carry), policy(), later) == []
