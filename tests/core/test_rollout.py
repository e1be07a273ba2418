"""Detection, starts, projection and acknowledgement, and whole passes over a small fleet."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from upgrader.core.actions import (
    Action,
    Annotate,
    DeletePod,
    Evict,
    Outcome,
    Result,
    SetUnschedulable,
    Transition,
)
from upgrader.core.detect import detect, upgrade_reason
from upgrader.core.fleet import fleet
from upgrader.core.policy import Policy
from upgrader.core.rollout import conclude, plan_steps, project
from upgrader.core.starts import acknowledged_failures, start_nodes
from upgrader.core.states import (
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
    OPERATOR_INITIAL_UNSCHEDULABLE,
    PER_UPGRADE,
    REQUESTED_ANNOTATION,
    RESTART_ONLY,
    SINCE_STATE,
    SKIP_LABEL,
    STARTED_AT,
    STATE_LABEL,
    STATE_SINCE,
    TARGET_REVISION,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.views import Control, Snapshot, node_view

from .factories import (
    NEW,
    OLD,
    T0,
    at,
    driver_pod,
    driver_set,
    gpu_pod,
    node,
    pdb,
    policy,
    snapshot,
    validator,
)

S = State
OLD_REASON = (
    "driver pod gpu-operator/nvidia-driver-n1-rev-old at revision rev-old, "
    "DaemonSet nvidia-driver-daemonset at rev-new (revision 2)"
)
REQUESTED = "annotation nvidia.com/gpu-driver-upgrade-requested=true"


# ----- detect --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("view", "pods", "expected"),
    [
        # Unlabelled nodes are adopted: required when the driver is behind, done when it is current.
        (
            node(state=None),
            [driver_pod(revision=OLD)],
            Transition("n1", None, S.UPGRADE_REQUIRED, {STATE_SINCE: at(5)}, OLD_REASON),
        ),
        (
            node(state=None),
            [driver_pod(revision=NEW)],
            Transition("n1", None, S.DONE, {STATE_SINCE: at(5)}, "driver is current"),
        ),
        (
            node(state=None, annotations={REQUESTED_ANNOTATION: "true"}),
            [driver_pod(revision=NEW)],
            Transition("n1", None, S.UPGRADE_REQUIRED, {STATE_SINCE: at(5)}, REQUESTED),
        ),
        # A new revision, or the request annotation, moves upgrade-done to upgrade-required.
        (
            node(state=S.DONE),
            [driver_pod(revision=OLD)],
            Transition("n1", S.DONE, S.UPGRADE_REQUIRED, {STATE_SINCE: at(5)}, OLD_REASON),
        ),
        (
            node(state=S.DONE, annotations={REQUESTED_ANNOTATION: "true"}),
            [driver_pod(revision=NEW)],
            Transition("n1", S.DONE, S.UPGRADE_REQUIRED, {STATE_SINCE: at(5)}, REQUESTED),
        ),
        # A node waiting for an upgrade it no longer needs goes back to done.
        (
            node(state=S.UPGRADE_REQUIRED),
            [driver_pod(revision=NEW)],
            Transition("n1", S.UPGRADE_REQUIRED, S.DONE, {STATE_SINCE: at(5)}, "driver is current"),
        ),
    ],
)
def test_detect_labels_and_relabels_idle_nodes(view: Any, pods: list[Any], expected: Transition) -> None:
    assert detect(snapshot([view], pods), Policy(), T0 + 5) == [expected]


@pytest.mark.parametrize(
    ("view", "pods"),
    [
        (node(state=S.DONE), [driver_pod(revision=NEW)]),
        (node(state=S.DONE, annotations={REQUESTED_ANNOTATION: "false"}), [driver_pod(revision=NEW)]),
        (node(state=S.UPGRADE_REQUIRED), [driver_pod(revision=OLD)]),
        # The old pod is on its way out and the new one is current.
        (node(state=S.DONE), [driver_pod(revision=OLD, terminating=True), driver_pod(revision=NEW)]),
        # Nodes upgrader is working on, or failed with the driver they failed with, stay as they are.
        (node(state=S.CORDON_REQUIRED, annotations={STARTED_AT: at(0)}), [driver_pod(revision=NEW)]),
        (node(state=S.POD_RESTART_REQUIRED, annotations={STARTED_AT: at(0)}), [driver_pod(revision=OLD)]),
        (node(state=S.FAILED, annotations={FAILED_AT: at(-9)}), [driver_pod(revision=OLD)]),
        (
            node(state=S.FAILED, annotations={FAILED_AT: at(-9), REQUESTED_ANNOTATION: "true"}),
            [driver_pod(revision=OLD)],
        ),
        (
            node(
                state=S.FAILED,
                annotations={FAILED_AT: at(-9), FAILED_DRIVER_POD: "uid-same", FAILED_STATE: "validation-required"},
            ),
            [driver_pod(revision=NEW, uid="uid-same")],
        ),
        (node(state=S.FAILED, annotations={FAILED_AT: at(-9)}), [driver_pod(revision=NEW, ready=False)]),
        # No driver pod to judge by (not created yet, or only one terminating, say with its DaemonSet
        # deleted): neither current nor behind, so nothing changes.
        (node(state=None), []),
        (node(state=S.UPGRADE_REQUIRED), [driver_pod(revision=OLD, terminating=True)]),
        (node(state=S.DONE), [driver_pod(revision=OLD, terminating=True)]),
        # A skipped node that is current stays done.
        (node(state=S.DONE, labels={SKIP_LABEL: "true"}), [driver_pod(revision=NEW)]),
        # Not a driver node: no driver pod and no driver DaemonSet selects it.
        (node(state=None, labels={"nvidia.com/gpu.present": "false"}), []),
    ],
)
def test_detect_leaves_these_alone(view: Any, pods: list[Any]) -> None:
    assert detect(snapshot([view], pods), Policy(), T0) == []


@pytest.mark.parametrize("state", [S.DONE, None])
def test_a_skipped_node_behind_carries_upgrade_required_as_in_the_operator(state: State | None) -> None:
    view = node(state=state, labels={SKIP_LABEL: "true"})
    (action,) = detect(snapshot([view], [driver_pod(revision=OLD)]), Policy(), T0 + 5)
    assert isinstance(action, Transition)
    assert (action.source, action.target) == (state, S.UPGRADE_REQUIRED)


def test_a_driver_pod_of_a_daemonset_without_revisions_is_not_behind() -> None:
    snap = snapshot([node(state=S.DONE)], [driver_pod(revision=OLD)], driver_sets=[driver_set(newest=None)])
    assert upgrade_reason(snap, snap.nodes["n1"]) is None


def _raw_node(name: str, state_label: str | None) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.present": "true"}
    if state_label is not None:
        labels[STATE_LABEL] = state_label
    return {
        "metadata": {"name": name, "labels": labels, "resourceVersion": "7"},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"nvidia.com/gpu": "8"},
        },
    }


def test_an_unparseable_state_label_is_reported_never_written() -> None:
    bad = node_view(_raw_node("n1", "Upgrade-Done"))
    good = node_view(_raw_node("n2", None))
    snap = snapshot([bad, good], [driver_pod("n1", revision=OLD), driver_pod("n2", revision=OLD)])
    assert bad.state is None
    assert fleet(snap).invalid == [
        ("n1", "label nvidia.com/gpu-driver-upgrade-state: unknown upgrade state 'Upgrade-Done'")
    ]
    assert [n.name for n in fleet(snap).managed] == ["n2"]
    actions = detect(snap, Policy(), T0)
    assert [a.node for a in actions] == ["n2"]
    assert plan_steps(snap, Policy()) == []
    _, starts = start_nodes(
        project(snap, actions), policy(maxParallelUpgrades=0, maxUnavailable="100%"), T0, True, set()
    )
    assert [a.node for a in starts] == ["n2"]


def test_fleet_sorts_managed_and_lists_skipped() -> None:
    snap = snapshot(
        [
            node("b", S.DONE),
            node("a", S.DONE),
            node("c", S.DONE, labels={SKIP_LABEL: "true"}),
            node("d", S.DONE, labels={SKIP_LABEL: "false"}),
        ],
        [driver_pod(n, revision=NEW) for n in "abcd"],
    )
    result = fleet(snap)
    assert [n.name for n in result.managed] == ["a", "b", "d"]
    assert result.skipped == ["c"]
    assert result.invalid == []


# ----- start ---------------------------------------------------------------------------------------------


def _start_annotations(now: float, was: str, before: str | None, target: str | None = NEW) -> dict[str, Any]:
    return {
        STATE_SINCE: at(now - T0),
        STARTED_AT: at(now - T0),
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
    }


@pytest.mark.parametrize(
    ("view", "annotations"),
    [
        (node(zone="a"), _start_annotations(T0 + 9, "false", "8")),
        (node(zone="a", unschedulable=True), _start_annotations(T0 + 9, "true", "8")),
        (node(zone="a", gpus=None), _start_annotations(T0 + 9, "false", None)),
        # A retried node keeps what it was like before upgrader first touched it.
        (
            node(
                zone="a",
                unschedulable=True,
                gpus="0",
                annotations={WAS_UNSCHEDULABLE: "false", GPU_BEFORE: "8"},
            ),
            _start_annotations(T0 + 9, "false", "8"),
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
    ("resumed_at", "expected"),
    [(None, set()), (T0 + 50, {"early"}), (T0 + 100, {"early", "late"}), (T0 + 10, set())],
)
def test_resume_acknowledges_failures_recorded_before_it(
    resumed_at: float | None, expected: set[str]
) -> None:
    snap = snapshot(
        [
            node("early", S.FAILED, annotations={FAILED_AT: at(20)}),
            node("late", S.FAILED, annotations={FAILED_AT: at(100)}),
            node("done", S.DONE, annotations={FAILED_AT: at(1)}),
        ],
        control=Control(resumed_at=resumed_at),
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
    for ctx, plan in plan_steps(world.snap, pol):
        world.apply(conclude(ctx, plan, world.apply(list(plan.attempts)), now))
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


def test_fleet_is_worked_out_once_per_snapshot_and_again_for_a_changed_one() -> None:
    snap = snapshot([node("a", S.DONE), node("b", S.DONE)], [driver_pod(n, revision=NEW) for n in "ab"])
    first = fleet(snap)
    first.managed.clear()  # a caller editing its copy changes nothing for the next one
    assert [n.name for n in fleet(snap).managed] == ["a", "b"]
    skipped = node("b", S.DONE, labels={SKIP_LABEL: "true"})
    changed = replace(snap, nodes={**snap.nodes, "b": skipped})
    assert [n.name for n in fleet(changed).managed] == ["a"]
    assert fleet(changed).skipped == ["b"]
    assert [n.name for n in fleet(snap).managed] == ["a", "b"]


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
