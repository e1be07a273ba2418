"""Starts, projection and acknowledgement, and whole passes over a small fleet (its `World` is shared by
other core tests). Detection is in test_detect.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from upgrader.core.model.actions import (
    Action,
    Annotate,
    DeletePod,
    Evict,
    Outcome,
    Result,
    SetUnschedulable,
    Transition,
)
from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    DRIVER_DELETED_AT,
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    GPU_BEFORE,
    HELD,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OUR_CORDON,
    PER_UPGRADE,
    REQUESTED_ANNOTATION,
    RESTART_ONLY,
    SINCE_STATE,
    STARTED_AT,
    STARTED_POOL,
    STATE_LABEL,
    STATE_SINCE,
    TARGET_REVISION,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.model.views import Control, Snapshot
from upgrader.core.policy.policy import Policy
from upgrader.core.rollout.detect import detect
from upgrader.core.rollout.starts import acknowledged_failures, start_nodes
from upgrader.core.rollout.stepping import conclude, node_steps, project

from .factories import (
    NEW,
    OLD,
    T0,
    at,
    driver_pod,
    gpu_pod,
    node,
    pdb,
    policy,
    snapshot,
    validator,
)

S = State


# ----- start ---------------------------------------------------------------------------------------------


def _start_annotations(
    now: float, was: str, before: str | None, target: str | None = NEW, schedulable: bool = True
) -> dict[str, Any]:
    return {
        STATE_SINCE: at(now - T0),
        STARTED_AT: at(now - T0),
        STARTED_POOL: None,  # no pools: the node counts against the policy's own budgets
        WAS_UNSCHEDULABLE: was,
        OPERATOR_INITIAL_UNSCHEDULABLE: "true" if was == "true" else None,
        GPU_BEFORE: before,
        TARGET_REVISION: target,
        RESTART_ONLY: None,
        FAILED_KIND: None,
        FAILED_STATE: None,
        FAILED_REASON: None,
        FAILED_AT: None,
        FAILED_DRIVER_POD: None,
        DRIVER_DELETED_AT: None,
        BLOCKED_KIND: None,
        BLOCKED_REASON: None,
        BLOCKED_SINCE: None,
        **dict.fromkeys(HELD),  # the preflight's hold record (core/fleet/preflight.py) goes with the start
        **({OUR_CORDON: None} if schedulable else {}),  # no cordon now: an old mark is no one's
    }


@pytest.mark.parametrize(
    ("view", "annotations"),
    [
        (node(zone="a"), _start_annotations(T0 + 9, "false", "8")),
        (node(zone="a", unschedulable=True), _start_annotations(T0 + 9, "true", "8", schedulable=False)),
        (node(zone="a", gpus=None), _start_annotations(T0 + 9, "false", None)),
        # A retried node keeps what it was like before upgrader first touched it.
        (
            node(
                zone="a",
                unschedulable=True,
                gpus="0",
                annotations={WAS_UNSCHEDULABLE: "false", GPU_BEFORE: "8"},
            ),
            _start_annotations(T0 + 9, "false", "8", schedulable=False),
        ),
    ],
)
def test_start_records_what_the_node_was_like(view: Any, annotations: dict[str, Any]) -> None:
    snap = snapshot([view], [driver_pod(revision=OLD)])
    schedule, actions = start_nodes(snap, Policy(), T0 + 9, True, set())
    assert schedule.starts == ["n1"]
    assert actions == [
        Transition("n1", S.UPGRADE_REQUIRED, S.CORDON_REQUIRED, annotations, "starting upgrade in domain a")
    ]


@pytest.mark.parametrize(("pol", "may_start"), [(policy(autoUpgrade=False), True), (Policy(), False)])
def test_nothing_starts_when_paused_halted_or_manual(pol: Policy, may_start: bool) -> None:
    snap = snapshot([node(zone="a")], [driver_pod(revision=OLD)])
    schedule, actions = start_nodes(snap, pol, T0, may_start, set())
    assert (schedule.starts, actions) == ([], [])


# ----- project and acknowledgement ------------------------------------------------------------------------


def test_project_folds_in_node_writes() -> None:
    snap = snapshot(
        [node(state=S.CORDON_REQUIRED, annotations={"keep": "1", "drop": "2"}), node("n2", S.DONE)]
    )
    after = project(
        snap,
        [
            Transition("n1", S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED, {STATE_SINCE: at(3), "drop": None}),
            Annotate("n2", {BLOCKED_KIND: "pdb"}),
            Annotate("ghost", {BLOCKED_KIND: "pdb"}),
            SetUnschedulable("n1", True),  # folded too: a later step of the pass must not cordon it again
        ],
    )
    n1, n2 = after.nodes["n1"], after.nodes["n2"]
    assert (n1.state, n1.labels[STATE_LABEL], dict(n1.annotations)) == (
        S.WAIT_FOR_JOBS_REQUIRED,
        "wait-for-jobs-required",
        {"keep": "1", STATE_SINCE: at(3), SINCE_STATE: "wait-for-jobs-required"},  # the clock names its state
    )
    assert n1.unschedulable is True
    assert (n2.state, dict(n2.annotations)) == (S.DONE, {BLOCKED_KIND: "pdb"})
    assert "ghost" not in after.nodes
    assert snap.nodes["n1"].state is S.CORDON_REQUIRED  # the input is not changed


@pytest.mark.parametrize(
    ("named", "expected"),
    [
        ({}, set()),
        ({"early": at(20)}, {"early"}),
        ({"early": at(20), "late": at(100)}, {"early", "late"}),
        # A later failure of the same node is a new one: the acknowledgement named the earlier one.
        ({"early": at(5), "late": at(99)}, set()),
        ({"done": at(1)}, set()),  # only a node that is upgrade-failed now
    ],
)
def test_an_acknowledgement_names_the_failure_as_recorded(named: dict[str, str], expected: set[str]) -> None:
    snap = snapshot(
        [
            node("early", S.FAILED, annotations={FAILED_AT: at(20)}),
            node("late", S.FAILED, annotations={FAILED_AT: at(100)}),
            node("done", S.DONE, annotations={FAILED_AT: at(1)}),
        ],
        control=Control(acknowledged=named),
    )
    assert acknowledged_failures(snap) == expected


# ----- whole passes ----------------------------------------------------------------------------------------


class World:
    """Just enough cluster for the core: applies actions to views the way the API server would."""

    def __init__(self, snap: Snapshot, refuse: set[str] | None = None) -> None:
        self.snap = snap
        self.refuse = refuse or set()  # pods whose eviction a PDB refuses

    def apply(self, actions: list[Action]) -> list[Outcome]:
        outcomes = []
        for action in actions:
            result = Result.OK
            if isinstance(action, SetUnschedulable):
                self._node(action.node, unschedulable=action.unschedulable)
            elif isinstance(action, Evict | DeletePod):
                if action.name in self.refuse:
                    result = Result.BLOCKED
                else:
                    self._remove_pod(action.node, action.name)
                    if isinstance(action, DeletePod):  # the DaemonSet brings the new driver up, module loaded
                        self._add_pod(driver_pod(action.node, revision=NEW, ready=True))
                        view = self.snap.nodes[action.node]
                        labels = {
                            **view.labels,
                            "nvidia.com/cuda.driver.major": "550",
                            "nvidia.com/cuda.driver.minor": "54",
                            "nvidia.com/cuda.driver.rev": "15",
                        }
                        self._node(action.node, labels=labels)
            outcomes.append(Outcome(action, result))
        self.snap = project(self.snap, [o.action for o in outcomes if o.ok])
        return outcomes

    def _node(self, name: str, **changes: Any) -> None:
        self.snap.nodes[name] = replace(self.snap.nodes[name], **changes)

    def _remove_pod(self, node_name: str, pod_name: str) -> None:
        for pods in (self.snap.node_pods, self.snap.driver_pods):
            pods[node_name] = [p for p in pods.get(node_name, []) if p.name != pod_name]

    def _add_pod(self, pod: Any) -> None:
        self.snap.node_pods.setdefault(pod.node, []).append(pod)
        self.snap.driver_pods.setdefault(pod.node, []).append(pod)


def one_pass(world: World, pol: Policy, now: float) -> None:
    """The controller's order: detect, steps and their conclusions, then starts."""
    world.apply(detect(world.snap, pol, now))
    for ctx, plan in node_steps(world.snap, pol):
        world.apply(conclude(ctx, plan, world.apply(list(plan.attempts)), now).actions)
    _, starts = start_nodes(world.snap, pol, now, True, acknowledged_failures(world.snap))
    world.apply(starts)


def states(world: World) -> dict[str, str]:
    return {n.name: n.labels.get(STATE_LABEL, "") for n in world.snap.nodes.values()}


def test_one_node_goes_all_the_way_pass_by_pass() -> None:
    snap = snapshot(
        [
            node(
                state=None, zone="a", driver_version="535.104.05", annotations={REQUESTED_ANNOTATION: "false"}
            )
        ],
        [driver_pod(revision=OLD, uid="driver-old"), validator(), gpu_pod("train-0"), gpu_pod("train-1")],
    )
    world = World(snap)
    seen = []
    for i in range(12):
        one_pass(world, Policy(), T0 + 10 * i)
        seen.append(states(world)["n1"])
    assert seen == [
        "cordon-required",  # adopted as upgrade-required and started in the same pass
        "wait-for-jobs-required",
        "pod-deletion-required",
        "pod-deletion-required",  # GPU pods evicted this pass, gone on the next
        "pod-restart-required",
        "pod-restart-required",  # old driver pod deleted, the new one comes up
        "validation-required",
        "uncordon-required",
        "upgrade-done",
        "upgrade-done",
        "upgrade-done",
        "upgrade-done",
    ]
    final = world.snap.nodes["n1"]
    assert final.unschedulable is False
    assert not any(k in final.annotations for k in PER_UPGRADE)
    assert final.annotations[STATE_SINCE] == at(80)


def test_a_fleet_rolls_one_domain_at_a_time_and_stops_at_a_pdb() -> None:
    nodes = [node(n, S.DONE, zone=z, since=-100) for n, z in (("a1", "a"), ("a2", "a"), ("b1", "b"))]
    pods = [driver_pod(n.name, revision=OLD, uid=f"drv-{n.name}") for n in nodes] + [
        validator(n.name) for n in nodes
    ]
    pods.append(gpu_pod("web-0", "b1", labels={"app": "web"}))
    budget = pdb("web", allowed=0, healthy=1, desired=1, expected=1)
    world = World(snapshot(nodes, pods, pdbs=[budget]), refuse={"web-0"})
    pol = policy(maxParallelUpgrades=2, maxUnavailable="100%")
    history = []
    for i in range(14):
        one_pass(world, pol, T0 + 10 * i)
        history.append(tuple(states(world).values()))
    assert history[0] == ("cordon-required", "cordon-required", "upgrade-required")  # a first, two at once
    for a1, a2, b1 in history:  # b waits until all of a is done
        assert b1 == "upgrade-required" or (a1, a2) == ("upgrade-done", "upgrade-done")
    assert history[-1] == ("upgrade-done", "upgrade-done", "pod-deletion-required")
    b1 = world.snap.nodes["b1"]
    assert b1.annotations[BLOCKED_KIND] == "pdb"
    assert b1.annotations[BLOCKED_REASON] == (
        "eviction of default/web-0 refused by PodDisruptionBudget default/web "
        "(disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1)"
    )
    # Blocked since the first refusal (the pass after entering the state); later passes keep it.
    entered = next(i for i, h in enumerate(history) if h[2] == "pod-deletion-required")
    assert b1.annotations[BLOCKED_SINCE] == at(10 * (entered + 1))
