"""Detection: which nodes need the upgrade and the state labels it writes, and the fleet it reads
(managed, skipped and invalid nodes)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from upgrader.core.fleet.managed import fleet
from upgrader.core.model.actions import Transition
from upgrader.core.model.states import (
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_STATE,
    REQUESTED_ANNOTATION,
    SKIP_LABEL,
    STARTED_AT,
    STATE_LABEL,
    STATE_SINCE,
    State,
)
from upgrader.core.model.views import node_view
from upgrader.core.policy.policy import Policy
from upgrader.core.rollout.detect import detect, upgrade_reason
from upgrader.core.rollout.starts import start_nodes
from upgrader.core.rollout.stepping import node_steps, project

from .factories import (
    NEW,
    OLD,
    T0,
    at,
    driver_pod,
    driver_set,
    node,
    policy,
    snapshot,
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
    assert node_steps(snap, Policy()) == []
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
