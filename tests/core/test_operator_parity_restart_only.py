"""GPU Operator parity: restart-only upgrades (an unchanged DRIVER_CONFIG_DIGEST): when one starts, the
driver restart under running GPU pods, and a configuration that changes on the way."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.actions import (
    DeletePod,
    Transition,
)
from upgrader.core.model.states import (
    FAILED_AT,
    REQUESTED_ANNOTATION,
    RESTART_ONLY,
    STARTED_AT,
    State,
)

from .factories import (
    NEW,
    OLD,
    T0,
    at,
    driver_pod,
    driver_set,
    gpu_pod,
    node,
    run_step,
    snapshot,
    transition,
)
from .operator_parity_fixtures import S, _start

IMAGES = ("nvcr.io/nvidia/driver:550.54.15-ubuntu22.04",)


def _restart_only_start(pod_digest: str | None, ds_digest: str | None, **kw: Any) -> Transition:
    driver = driver_pod(revision=OLD, digest=pod_digest, images=kw.pop("pod_images", IMAGES))
    view = kw.pop("view", node(zone="a"))
    return _start(view, [driver], [driver_set(digest=ds_digest, images=IMAGES)])


def test_an_unchanged_digest_starts_a_restart_only_upgrade() -> None:
    started = _restart_only_start("1234", "1234")
    assert started.annotations[RESTART_ONLY] == "1234"  # the digest it started for
    assert started.message == "starting restart-only upgrade (DRIVER_CONFIG_DIGEST 1234 unchanged) in domain a"


@pytest.mark.parametrize(
    ("pod_digest", "ds_digest", "kw"),
    [
        ("1234", "5678", {}),  # the install configuration changed
        (None, "1234", {}),  # a driver pod from before the Operator wrote digests
        ("1234", None, {}),
        ("1234", "1234", {"pod_images": ("nvcr.io/nvidia/driver:535.104.05-ubuntu22.04",)}),  # ours: images too
        ("1234", "1234", {"view": node(zone="a", annotations={REQUESTED_ANNOTATION: "true"})}),
        ("1234", "1234", {"view": node(zone="a", annotations={FAILED_AT: at(-9)})}),  # a retry after a failure
    ],
)
def test_otherwise_the_upgrade_is_a_full_one(pod_digest: str | None, ds_digest: str | None, kw: Any) -> None:
    assert _restart_only_start(pod_digest, ds_digest, **kw).annotations[RESTART_ONLY] is None


def _restart_only(state: State, pod_digest: str, ds_digest: str, *pods: Any) -> Any:
    view = node(state=state, since=0, unschedulable=True, annotations={STARTED_AT: at(0), RESTART_ONLY: pod_digest})
    driver = driver_pod(revision=OLD, uid="driver-old", digest=pod_digest, images=IMAGES)
    return snapshot([view], [driver, *pods], driver_sets=[driver_set(digest=ds_digest, images=IMAGES)])


def test_a_restart_only_node_goes_from_cordon_to_the_restart() -> None:
    _, actions = run_step(_restart_only(S.CORDON_REQUIRED, "1234", "1234"), now=T0 + 1)
    assert transition(actions).target is S.POD_RESTART_REQUIRED


def test_a_restart_only_restart_leaves_the_gpu_pods_running() -> None:
    plan, _ = run_step(_restart_only(S.POD_RESTART_REQUIRED, "1234", "1234", gpu_pod("train-0")), now=T0 + 1)
    assert plan.blocked is None
    assert [a.uid for a in plan.attempts if isinstance(a, DeletePod)] == ["driver-old"]


def test_a_changed_configuration_sends_a_restart_only_node_back_to_its_gpu_pods() -> None:
    _, actions = run_step(_restart_only(S.POD_RESTART_REQUIRED, "1234", "9999", gpu_pod("train-0")), now=T0 + 1)
    moved = transition(actions)
    assert (moved.source, moved.target) == (S.POD_RESTART_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED)
    assert moved.annotations[RESTART_ONLY] is None


def test_a_configuration_changed_under_a_restart_only_restart_halts_while_gpu_pods_run() -> None:
    """The template changed between the old pod's deletion and the new pod: that driver installs anew,
    and GPU pods are still there. Said, not passed over."""
    marks = {STARTED_AT: at(0), RESTART_ONLY: "1234"}
    view = node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True, annotations=marks)
    new = driver_pod(revision=NEW, digest="9999", images=IMAGES)
    snap = snapshot([view], [new, gpu_pod("train-0")], driver_sets=[driver_set(digest="9999", images=IMAGES)])
    plan, _ = run_step(snap, now=T0 + 1)
    assert plan.blocked is not None and plan.blocked.kind == "gpu-pods"
    assert plan.blocked.reason == (
        "the driver configuration changed during a restart-only upgrade (DRIVER_CONFIG_DIGEST 1234 -> 9999) "
        "while 1 pod still held GPUs: default/train-0; move them off the node"
    )
    plan, _ = run_step(snapshot([view], [new], driver_sets=[driver_set(digest="9999", images=IMAGES)]), now=T0 + 1)
    assert plan.blocked is None and plan.trigger == "driver_restarted"


def test_the_restart_waits_for_a_gpu_pod_in_any_unfinished_phase() -> None:
    """Stricter than the Operator's filter: a GPU pod in phase Unknown (a lost kubelet) still blocks."""
    view = node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})
    plan, _ = run_step(snapshot([view], [driver_pod(uid="driver-old"), gpu_pod("lost", phase="Unknown")]), now=T0 + 1)
    assert plan.blocked is not None and "default/lost" in plan.blocked.reason
