"""What a pass derives from the whole fleet (the fleet split, the census, detect's quiet nodes),
carried between passes and updated from the nodes that changed (core/node/facts.py `derived`,
core/rollout/census.py `recount`), and within a pass from the nodes its own writes changed
(rollout.project): on random fleets changed at random, exactly what is worked out from scratch."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.factories import NEW, OLD, T0, driver_pod, node, policy, snapshot
from upgrader.core.fleet.managed import fleet
from upgrader.core.model.actions import Annotate, Transition
from upgrader.core.model.states import HELD_KIND, SKIP_LABEL, State
from upgrader.core.model.views import NodeView, PodView, Snapshot
from upgrader.core.node.facts import FactsCarry
from upgrader.core.rollout.census import census
from upgrader.core.rollout.detect import detect
from upgrader.core.rollout.stepping import project

NAMES = [f"n{i}" for i in range(7)]
STATES = [None, State.UPGRADE_REQUIRED, State.CORDON_REQUIRED, State.DRAIN_REQUIRED, State.DONE, State.FAILED]


@st.composite
def a_node(draw: st.DrawFn, name: str) -> tuple[NodeView, list[PodView]]:
    labels = {SKIP_LABEL: "true"} if draw(st.integers(0, 5)) == 0 else {}
    held = {HELD_KIND: "image"} if draw(st.integers(0, 3)) == 0 else {}
    view = node(name, draw(st.sampled_from(STATES)), zone=draw(st.sampled_from(["a", "b", None])), labels=labels,
                annotations=held, since=draw(st.sampled_from([-600, -60, None])),
                unschedulable=draw(st.booleans()), ready=draw(st.sampled_from([True, True, False])))
    pods = [driver_pod(name, draw(st.sampled_from([OLD, NEW])))] if draw(st.integers(0, 4)) else []
    return view, pods


def summary(snap: Snapshot) -> dict[str, Any]:
    split = fleet(snap)
    managed = [n.name for n in split.managed]
    counted = census(snap, policy().failure_domains, managed)
    return {
        "split": (managed, split.skipped, split.invalid),
        "views": [id(n) for n in split.managed],
        "census": (
            [id(n) for n in counted.nodes], counted.by_state, counted.per_domain, counted.order,
            [n.name for n in counted.in_progress], [id(n) for n in counted.in_progress], counted.watched,
            {d: [id(n) for n in ns] for d, ns in counted.grouping.by_domain.items()},
            counted.grouping.in_progress, counted.grouping.unavailable,
        ),
        "detect": detect(snap, policy(), T0),
    }


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_carried_and_updated_is_what_a_pass_works_out_afresh(data: st.DataObject) -> None:
    carry = FactsCarry()
    fleet_now = {name: data.draw(a_node(name)) for name in data.draw(st.lists(st.sampled_from(NAMES), min_size=1,
                                                                               unique=True))}
    for _ in range(data.draw(st.integers(1, 6))):
        for name in data.draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True)):
            if name in fleet_now and data.draw(st.integers(0, 5)) == 0:
                del fleet_now[name]  # the node went
            else:
                fleet_now[name] = data.draw(a_node(name))  # came, or a new view and pods
        if not fleet_now:
            continue
        views = [v for v, _ in fleet_now.values()]
        pods = [p for _, ps in fleet_now.values() for p in ps]
        snap = snapshot(views, pods)
        ours = replace(snap, carry=carry)
        assert summary(ours) == summary(snap)
        # The pass's own writes folded in (rollout.project): only those nodes are worked out again.
        writes = [Transition(name, fleet_now[name][0].state, data.draw(st.sampled_from(STATES[1:])), {}, "")
                  if data.draw(st.booleans()) else Annotate(name, {HELD_KIND: data.draw(st.sampled_from([None, "x"]))})
                  for name in data.draw(st.lists(st.sampled_from(sorted(fleet_now)), max_size=3, unique=True))]
        folded = project(ours, writes)
        assert summary(folded) == summary(replace(folded, carry=None))
