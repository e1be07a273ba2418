"""The GPU Operator's upgrade behaviour a migrating user relies on, decided by the core: drain as the
fallback of GPU pod deletion, the drain-skip pod label, the Operator's node annotations (taking a
rollout over from it), failed nodes that recover, restart-only upgrades, and Events after writes.

Scenarios are taken from k8s-operator-libs `pkg/upgrade` (upgrade_state_test.go, pod_manager_test.go)
and gpu-operator (internal/predicates/restart_only_test.go); the expected words are what a user sees.
"""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.actions import (
    Action,
    Annotate,
    DeletePod,
    Event,
    Evict,
    Outcome,
    Result,
    SetUnschedulable,
    Transition,
)
from upgrader.core.detect import detect
from upgrader.core.reconcile import reconcile
from upgrader.core.starts import start_nodes
from upgrader.core.states import (
    DRAIN_SKIP_LABEL,
    FAILED_AT,
    FAILED_DRIVER_POD,
    FAILED_REASON,
    FAILED_STATE,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OPERATOR_VALIDATION_START,
    OPERATOR_WAIT_START,
    REQUESTED_ANNOTATION,
    RESTART_ONLY,
    SINCE_STATE,
    SKIP_LABEL,
    STARTED_AT,
    STATE_SINCE,
    TARGET_REVISION,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.steps import StepPlan

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
    pod,
    policy,
    run_step,
    snapshot,
    step,
    transition,
    validator,
)

S = State
DRAIN = {"drain": {"enable": True}}


def _deletion(*pods: Any, claims: dict[str, bool] | None = None) -> Any:
    return snapshot(
        [node(state=S.POD_DELETION_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})],
        [driver_pod(uid="driver-old"), validator(), *pods],
        pdbs=[pdb("web", selector="app=web", allowed=0, healthy=2, desired=2)],
        claims=claims,
    )


def _refused(plan: StepPlan, name: str) -> list[Outcome]:
    return [
        Outcome(a, Result.BLOCKED, "Cannot evict pod") if getattr(a, "name", "") == name else Outcome(a, Result.OK)
        for a in plan.attempts
    ]


# ----- GPU pod deletion, and drain as its fallback -----------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "why"),
    [
        ([gpu_pod("solo", owner=None)], "default/solo not managed by a controller"),
        ([gpu_pod("scratch", empty_dir=True)], "default/scratch uses emptyDir"),
    ],
)
def test_pods_the_policy_may_not_delete_send_the_node_to_drain_at_once(pods: list[Any], why: str) -> None:
    plan, actions = run_step(_deletion(*pods), pol=policy(**DRAIN), now=T0 + 5)
    assert plan.attempts == []  # as the Operator: nothing is evicted when not every GPU pod can be
    moved = transition(actions)
    assert (moved.source, moved.target) == (S.POD_DELETION_REQUIRED, S.DRAIN_REQUIRED)
    warning = [a for a in actions if isinstance(a, Event)]
    assert len(warning) == 1 and warning[0].type == "Warning"
    assert warning[0].message.startswith("GPU pod deletion cannot finish: cannot evict: " + why)
    assert warning[0].message.endswith("drain.enable is set, so the node is drained")


@pytest.mark.parametrize(
    "pods", [[gpu_pod("solo", owner=None, terminating=True)], [gpu_pod("s", empty_dir=True, terminating=True)]]
)
def test_a_pod_already_terminating_is_waited_for_not_drained(pods: list[Any]) -> None:
    plan, actions = run_step(_deletion(*pods), pol=policy(**DRAIN), now=T0 + 5)
    assert not any(isinstance(a, Transition) for a in actions) and plan.blocked is None
    assert plan.waiting is not None and plan.waiting.startswith("waiting for 1 pod to terminate")


def test_the_gpu_pods_it_may_delete_go_first_then_the_drain_takes_the_rest() -> None:
    """Ours: the Operator evicts none when one cannot go; evicting the rest first leaves a narrow
    drain.podSelector (NVIDIA's advice) only the pods deletion could not take."""
    solo, web = gpu_pod("solo", owner=None), gpu_pod("train-0", uid="u-train")
    plan, actions = run_step(_deletion(solo, web), pol=policy(**DRAIN), now=T0 + 5)
    assert [a.uid for a in plan.attempts if isinstance(a, Evict)] == ["u-train"]
    assert not any(isinstance(a, Transition) for a in actions)
    assert plan.waiting == (
        "evicting 1 pod: default/train-0; cannot evict: default/solo not managed by a controller (set "
        "gpuPodDeletion.force to delete); the rest go first"
    )
    _, actions = run_step(_deletion(solo, gpu_pod("train-0", terminating=True)), pol=policy(**DRAIN), now=T0 + 6)
    assert not any(isinstance(a, Transition) for a in actions)  # still terminating
    _, actions = run_step(_deletion(solo), pol=policy(**DRAIN), now=T0 + 7)
    assert transition(actions).target is S.DRAIN_REQUIRED


def test_without_drain_the_same_pods_halt_the_rollout_as_before() -> None:
    _, actions = run_step(_deletion(gpu_pod("solo", owner=None)), now=T0 + 5)
    assert not any(isinstance(a, Transition) for a in actions)
    assert isinstance(actions[0], Annotate) and actions[0].annotations["gpu-upgrader.io/blocked-kind"] == "pod-deletion"


def test_a_refused_eviction_blocks_until_the_deletion_timeout_then_drains() -> None:
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}))
    pol = policy(gpuPodDeletion={"timeoutSeconds": 300}, **DRAIN)
    _, plan = step(snap, pol=pol)
    _, early = run_step(snap, pol=pol, now=T0 + 299, outcomes=_refused(plan, "web-0"))
    assert not any(isinstance(a, Transition) for a in early)  # blocked: the rollout halts meanwhile
    _, late = run_step(snap, pol=pol, now=T0 + 300, outcomes=_refused(plan, "web-0"))
    assert transition(late).target is S.DRAIN_REQUIRED
    assert "PodDisruptionBudget default/web" in transition(late).message


def test_pods_that_never_terminate_drain_after_the_timeout() -> None:
    snap = _deletion(gpu_pod("stuck", terminating=True))
    _, actions = run_step(snap, pol=policy(gpuPodDeletion={"timeoutSeconds": 60}, **DRAIN), now=T0 + 60)
    assert transition(actions).target is S.DRAIN_REQUIRED
    assert "waiting for 1 pod to terminate: default/stuck (past the 60s timeout)" in transition(actions).message


def test_no_deletion_timeout_means_no_fallback_for_a_refusal() -> None:
    snap = _deletion(gpu_pod("web-0", labels={"app": "web"}))
    pol = policy(gpuPodDeletion={"timeoutSeconds": 0}, **DRAIN)
    _, plan = step(snap, pol=pol)
    _, actions = run_step(snap, pol=pol, now=T0 + 86_400, outcomes=_refused(plan, "web-0"))
    assert not any(isinstance(a, Transition) for a in actions)


def test_the_drain_skips_pods_labelled_drain_skip() -> None:
    snap = snapshot(
        [node(state=S.DRAIN_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})],
        [
            pod("operator", labels={DRAIN_SKIP_LABEL: "true", "app": "gpu-operator"}),
            pod("keep-false", labels={DRAIN_SKIP_LABEL: "false"}),
            pod("web"),
        ],
    )
    plan, _ = run_step(snap, pol=policy(**DRAIN), now=T0 + 1)
    assert sorted(a.name for a in plan.attempts if isinstance(a, Evict)) == ["keep-false", "web"]


def test_gpu_pod_deletion_evicts_mig_and_dra_pods_but_not_others() -> None:
    snap = _deletion(
        gpu_pod("mig", uid="u-mig"),  # gpus counts MIG slices as well (views)
        pod("dra", claims=("default/gpu-claim",), uid="u-dra"),
        pod("nic", claims=("default/nic-claim",), uid="u-nic"),
        pod("done", claims=("default/gpu-claim",), phase="Succeeded"),
        claims={"default/gpu-claim": True, "default/nic-claim": False},
    )
    _, plan = step(snap)
    assert sorted(a.name for a in plan.attempts if isinstance(a, Evict)) == ["dra", "mig"]


def test_the_restart_waits_for_a_dra_gpu_pod() -> None:
    snap = snapshot(
        [node(state=S.POD_RESTART_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})],
        [driver_pod(uid="driver-old"), pod("dra", claims=("default/gpu-claim",))],
        claims={"default/gpu-claim": True},
    )
    _, plan = step(snap)
    assert plan.blocked is not None and "default/dra" in plan.blocked.reason
    assert not any(isinstance(a, DeletePod) for a in plan.attempts)


# ----- the Operator's node annotations ---------------------------------------------------------------


def _start(view: Any, pods: list[Any] | None = None, sets: list[Any] | None = None) -> Transition:
    snap = snapshot([view], pods or [driver_pod(revision=OLD)], driver_sets=sets)
    _, actions = start_nodes(snap, policy(maxUnavailable="100%"), T0, True, set())
    return transition(actions)


def test_a_start_on_a_cordoned_node_writes_the_operators_record_too() -> None:
    started = _start(node(zone="a", unschedulable=True))
    assert started.annotations[WAS_UNSCHEDULABLE] == "true"
    assert started.annotations[OPERATOR_INITIAL_UNSCHEDULABLE] == "true"


def test_a_start_removes_an_operator_record_that_no_longer_holds() -> None:
    """The Operator recorded a cordon that someone lifted since: keeping the record would leave our own
    cordon in place at the end."""
    started = _start(node(zone="a", annotations={OPERATOR_INITIAL_UNSCHEDULABLE: "true"}))
    assert started.annotations[WAS_UNSCHEDULABLE] == "false"
    assert started.annotations[OPERATOR_INITIAL_UNSCHEDULABLE] is None


@pytest.mark.parametrize(
    ("annotations", "attempts"),
    [
        ({OPERATOR_INITIAL_UNSCHEDULABLE: "true"}, []),
        ({OPERATOR_INITIAL_UNSCHEDULABLE: ""}, []),  # the Operator reads presence
        ({WAS_UNSCHEDULABLE: "false"}, ["uncordon"]),
    ],
)
def test_uncordon_honours_the_operators_record(annotations: dict[str, str], attempts: list[str]) -> None:
    view = node(state=S.UNCORDON_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0), **annotations})
    plan, _ = run_step(snapshot([view], [driver_pod(revision=NEW)]), now=T0 + 1)
    assert ["uncordon" for a in plan.attempts] == attempts


def test_reaching_done_clears_the_operators_record() -> None:
    view = node(
        state=S.UNCORDON_REQUIRED,
        since=0,
        unschedulable=True,
        annotations={STARTED_AT: at(0), OPERATOR_INITIAL_UNSCHEDULABLE: "true"},
    )
    _, actions = run_step(snapshot([view], [driver_pod(revision=NEW)]), now=T0 + 1)
    assert transition(actions).annotations[OPERATOR_INITIAL_UNSCHEDULABLE] is None


@pytest.mark.parametrize(
    ("state", "annotations", "since"),
    [
        (S.WAIT_FOR_JOBS_REQUIRED, {OPERATOR_WAIT_START: str(int(T0) - 120)}, at(-120)),
        (S.VALIDATION_REQUIRED, {OPERATOR_VALIDATION_START: str(int(T0) - 30)}, at(-30)),
        (S.WAIT_FOR_JOBS_REQUIRED, {OPERATOR_WAIT_START: "yesterday"}, at(0)),  # unreadable: from now
        (S.WAIT_FOR_JOBS_REQUIRED, {OPERATOR_WAIT_START: "1764500000000"}, at(0)),  # milliseconds: ignored
        (S.WAIT_FOR_JOBS_REQUIRED, {OPERATOR_WAIT_START: "\u00b2"}, at(0)),  # a digit, not a decimal one
        (S.POD_RESTART_REQUIRED, {}, at(0)),
        # A state-since from an earlier life of the node (it was done, then the Operator started it).
        (S.VALIDATION_REQUIRED, {STATE_SINCE: at(-86_400), OPERATOR_VALIDATION_START: str(int(T0) - 20)}, at(-20)),
        (S.POD_DELETION_REQUIRED, {STATE_SINCE: at(-86_400)}, at(0)),
    ],
)
def test_a_node_the_operator_started_is_adopted_with_its_timers(
    state: State, annotations: dict[str, str], since: str
) -> None:
    # The runbook marks the Operator's own cordon (was-unschedulable=false) before the hand-over.
    view = node(state=state, unschedulable=True, annotations={**annotations, WAS_UNSCHEDULABLE: "false"})
    actions = detect(snapshot([view], [driver_pod(revision=OLD)]), policy(), T0)
    adopted = [a for a in actions if isinstance(a, Annotate)]
    assert adopted == [
        Annotate("n1", {STARTED_AT: at(0), STATE_SINCE: since, SINCE_STATE: state.value, WAS_UNSCHEDULABLE: "false",
                        TARGET_REVISION: NEW})
    ]
    (event,) = [a for a in actions if isinstance(a, Event)]
    assert event.message.startswith(f"adopted in {state.value} (started by another controller)")


def test_an_adopted_cordon_no_record_accounts_for_stays_on_and_says_so() -> None:
    """Cordoned, adopted, and neither the Operator's mark nor ours says whose cordon it is (an admin's,
    on a node someone set in progress by hand, as often as the Operator's): it is not lifted."""
    view = node(state=S.POD_RESTART_REQUIRED, unschedulable=True)
    (adopted, event) = detect(snapshot([view], [driver_pod(revision=OLD)]), policy(), T0)
    assert isinstance(adopted, Annotate) and adopted.annotations[WAS_UNSCHEDULABLE] is None
    assert isinstance(event, Event) and event.message.endswith(
        f"no record says who cordoned it: it stays cordoned at the end unless {WAS_UNSCHEDULABLE}=false is set "
        "(the GPU Operator's own cordon)"
    )


def test_an_adopted_node_the_operator_found_cordoned_stays_cordoned() -> None:
    view = node(state=S.POD_RESTART_REQUIRED, unschedulable=True, annotations={OPERATOR_INITIAL_UNSCHEDULABLE: "true"})
    (adopted, event) = detect(snapshot([view], [driver_pod(revision=OLD)]), policy(), T0)
    assert isinstance(adopted, Annotate) and adopted.annotations[WAS_UNSCHEDULABLE] == "true"
    assert isinstance(event, Event) and "it stays cordoned at the end" in event.message


def test_a_timer_taken_over_from_the_operator_times_the_wait_out() -> None:
    """Adopted 250 s into a 300 s wait for jobs: it times out 50 s later, not 300 s later."""
    marks = {OPERATOR_WAIT_START: str(int(T0)), WAS_UNSCHEDULABLE: "false"}
    view = node(state=S.WAIT_FOR_JOBS_REQUIRED, unschedulable=True, annotations=marks)
    jobs = [gpu_pod("train-0", owner="Job", labels={"app": "train"})]
    snap = snapshot([view], [driver_pod(revision=OLD), *jobs])
    (adopted, _) = detect(snap, policy(), T0 + 250)
    assert isinstance(adopted, Annotate)
    snap = snapshot([view.with_changes(None, adopted.annotations)], [driver_pod(revision=OLD), *jobs])
    pol = policy(waitForCompletion={"podSelector": "app=train", "timeoutSeconds": 300}, onBlockedTimeout="fail")
    _, actions = run_step(snap, pol=pol, now=T0 + 300)
    assert transition(actions).target is S.FAILED
    moved_on = node(state=S.WAIT_FOR_JOBS_REQUIRED, annotations={**adopted.annotations, OPERATOR_WAIT_START: "1"})
    _, actions = run_step(snapshot([moved_on], [driver_pod(revision=OLD)]), pol=pol, now=T0 + 1)
    assert transition(actions).annotations[OPERATOR_WAIT_START] is None  # honoured, then cleared


def test_nodes_upgrader_started_are_not_adopted() -> None:
    view = node(state=S.POD_RESTART_REQUIRED, unschedulable=True, annotations={STARTED_AT: at(-5)})
    assert detect(snapshot([view], [driver_pod(revision=OLD)]), policy(), T0) == []


# ----- upgrade-failed recovers when its cause is fixed -----------------------------------------------


def _failed(**annotations: str) -> Any:
    return node(
        state=S.FAILED,
        unschedulable=True,
        annotations={STARTED_AT: at(-600), FAILED_AT: at(-60), FAILED_REASON: "image pull failed", **annotations},
    )


def test_a_failed_node_whose_driver_came_up_at_the_newest_revision_validates_again() -> None:
    snap = snapshot([_failed(**{WAS_UNSCHEDULABLE: "false"})], [driver_pod(revision=NEW, uid="fixed")])
    (moved,) = detect(snap, policy(), T0)
    assert isinstance(moved, Transition)
    assert (moved.source, moved.target) == (S.FAILED, S.VALIDATION_REQUIRED)
    assert moved.annotations[FAILED_AT] is None and moved.annotations[STATE_SINCE] == at(0)
    assert moved.message == (
        "driver pod gpu-operator/nvidia-driver-n1-rev-new is Running and Ready at revision rev-new since the node "
        "failed (image pull failed); validating the node again"
    )


@pytest.mark.parametrize(
    ("annotations", "record"),
    [({}, None), ({OPERATOR_INITIAL_UNSCHEDULABLE: "true"}, "true"), ({WAS_UNSCHEDULABLE: "false"}, "false")],
)
def test_a_recovered_node_keeps_only_a_cordon_record_it_can_prove(
    annotations: dict[str, str], record: str | None
) -> None:
    """A node failed by the GPU Operator, or labelled failed by hand, with no record of who cordoned it:
    the cordon stays on at the end, and the recovery says so (issue 11: never lift a cordon on a guess)."""
    (moved,) = detect(snapshot([_failed(**annotations)], [driver_pod(revision=NEW, uid="fixed")]), policy(), T0)
    assert isinstance(moved, Transition) and moved.annotations[WAS_UNSCHEDULABLE] == record
    assert moved.message is not None
    assert moved.message.endswith(
        "; no record says who cordoned it: it stays cordoned at the end unless "
        "gpu-upgrader.io/was-unschedulable=false is set (the GPU Operator's own cordon)"
    ) == (record is None)


@pytest.mark.parametrize(
    ("pods", "annotations"),
    [
        # Failed validation with the driver pod it still has (Ready or not when it failed).
        ([driver_pod(revision=NEW, uid="same")], {FAILED_DRIVER_POD: "same", FAILED_STATE: "validation-required"}),
        ([driver_pod(revision=NEW, ready=False)], {}),  # still not Ready
        ([driver_pod(revision=OLD)], {}),  # the old driver (a failure before the restart)
        ([driver_pod(revision=NEW, phase="Pending")], {}),
        ([driver_pod(revision=NEW, terminating=True)], {}),
    ],
)
def test_a_failed_node_stays_failed_until_its_driver_changed(pods: list[Any], annotations: dict[str, str]) -> None:
    assert detect(snapshot([_failed(**annotations)], pods), policy(), T0) == []


def test_after_a_failure_elsewhere_the_same_pod_coming_up_is_the_fix() -> None:
    """A pod stuck on a missing image (recorded, not Ready, as the node failed) that pulls once the
    image is published: that is the fix, so the node validates again."""
    failed = _failed(**{FAILED_DRIVER_POD: "stuck", FAILED_STATE: "pod-restart-required"})
    (moved,) = detect(snapshot([failed], [driver_pod(revision=NEW, uid="stuck")]), policy(), T0)
    assert isinstance(moved, Transition) and moved.target is S.VALIDATION_REQUIRED


def test_a_failure_records_the_driver_pod_at_the_newest_revision_ready_or_not() -> None:
    """So a driver that flaps Ready and not Ready cannot loop a node through validation forever."""
    view = node(state=S.VALIDATION_REQUIRED, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})
    flapping = driver_pod(revision=NEW, uid="flapping", ready=False)
    _, actions = run_step(snapshot([view], [flapping, validator(ready=False)]), now=T0 + 600)
    failed = transition(actions)
    assert (failed.target, failed.annotations[FAILED_DRIVER_POD]) == (S.FAILED, "flapping")
    again = _failed(**{k: v for k, v in failed.annotations.items() if v is not None})
    back_up = driver_pod(revision=NEW, uid="flapping", ready=True)
    assert detect(snapshot([again], [back_up]), policy(), T0 + 700) == []


def test_a_skipped_failed_node_is_left_to_the_person_repairing_it() -> None:
    skipped = node(
        state=S.FAILED,
        unschedulable=True,
        labels={SKIP_LABEL: "true"},
        annotations={STARTED_AT: at(-600), FAILED_AT: at(-60), FAILED_STATE: "pod-restart-required"},
    )
    assert detect(snapshot([skipped], [driver_pod(revision=NEW)]), policy(), T0) == []


def test_a_node_the_operator_left_failed_is_upgraders_once_it_recovers() -> None:
    operator_failed = node(state=S.FAILED, unschedulable=True)  # no gpu-upgrader.io record at all
    actions = detect(snapshot([operator_failed], [driver_pod(revision=NEW)]), policy(), T0)
    moved = transition(actions)
    assert moved.annotations[STARTED_AT] == at(0)  # not adopted later


def test_a_recovery_waits_for_a_max_parallel_upgrades_slot() -> None:
    busy = node("n0", state=S.POD_RESTART_REQUIRED, annotations={STARTED_AT: at(0)})
    snap = snapshot([busy, _failed()], [driver_pod("n0", revision=OLD), driver_pod(revision=NEW, uid="fixed")])
    assert detect(snap, policy(maxParallelUpgrades=1), T0) == []
    assert len(detect(snap, policy(maxParallelUpgrades=2), T0)) == 1


# ----- restart-only upgrades (DRIVER_CONFIG_DIGEST) ----------------------------------------------------

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


# ----- Events follow what landed -------------------------------------------------------------------------


def _events_of(outcome_for: Any) -> list[Event]:
    snap = snapshot(
        [node(state=S.CORDON_REQUIRED, since=0, annotations={STARTED_AT: at(0)})],
        [driver_pod(revision=OLD)],
    )
    applied: list[Action] = []

    def apply(actions: list[Action]) -> list[Outcome]:
        out = [Outcome(a, outcome_for(a)) for a in actions]
        applied.extend(o.action for o in out if o.ok)
        return out

    reconcile(snap, policy(), T0 + 5, apply)
    return [a for a in applied if isinstance(a, Event)]


def test_every_state_change_that_landed_leaves_a_normal_event_in_the_operators_words() -> None:
    events = _events_of(lambda a: Result.OK)
    assert [(e.type, e.message) for e in events if e.node == "n1"] == [
        ("Normal", "Successfully updated node state label to wait-for-jobs-required (from cordon-required)")
    ]


def test_a_refused_state_change_leaves_no_event() -> None:
    events = _events_of(lambda a: Result.CONFLICT if isinstance(a, Transition) else Result.OK)
    assert [e for e in events if e.node == "n1"] == []


def test_a_warning_decided_with_a_refused_state_change_is_not_sent() -> None:
    """The drain fallback is a transition and a Warning: if the transition conflicts, neither happened."""
    snap = _deletion(gpu_pod("solo", owner=None))
    sent: list[Action] = []

    def apply(actions: list[Action]) -> list[Outcome]:
        out = [Outcome(a, Result.CONFLICT if isinstance(a, Transition) else Result.OK) for a in actions]
        sent.extend(o.action for o in out)
        return out

    reconcile(snap, policy(**DRAIN), T0 + 5, apply)
    assert any(isinstance(a, Transition) and a.target is S.DRAIN_REQUIRED for a in sent)
    assert [a for a in sent if isinstance(a, Event) and a.node == "n1"] == []


@pytest.mark.parametrize(
    ("state", "pol", "finished"),
    [
        (S.POD_DELETION_REQUIRED, {}, "Deleted workload pods on the node for the driver upgrade"),
        (S.DRAIN_REQUIRED, DRAIN, "Successfully drained the node"),
    ],
)
def test_finished_deletion_and_drain_are_told_as_the_operator_tells_them(
    state: State, pol: dict[str, Any], finished: str
) -> None:
    view = node(state=state, since=0, unschedulable=True, annotations={STARTED_AT: at(0)})
    snap = snapshot([view], [driver_pod(revision=OLD)])
    applied: list[Action] = []

    def apply(actions: list[Action]) -> list[Outcome]:
        applied.extend(actions)
        return [Outcome(a, Result.OK) for a in actions]

    reconcile(snap, policy(**pol), T0 + 5, apply)
    messages = [a.message for a in applied if isinstance(a, Event) and a.node == "n1"]
    assert messages == [
        finished,
        f"Successfully updated node state label to pod-restart-required (from {state.value})",
    ]


def test_a_failed_node_someone_uncordoned_is_cordoned_again_before_it_validates() -> None:
    """Found by the property search: upgrade-failed set by hand on a done, schedulable node whose driver
    is current went to validation-required schedulable. The cordon goes back first, recorded as ours."""
    # Found again: an admin's record from before the start ("true") must not survive on our new cordon.
    marks = {FAILED_AT: at(-60), FAILED_REASON: "by hand", WAS_UNSCHEDULABLE: "true"}
    marks[OPERATOR_INITIAL_UNSCHEDULABLE] = "true"
    view = node(state=S.FAILED, unschedulable=False, annotations=marks)
    actions = detect(snapshot([view], [driver_pod(revision=NEW, uid="fixed")]), policy(maxParallelUpgrades=1), T0)
    assert actions[:2] == [
        Annotate("n1", {WAS_UNSCHEDULABLE: "false", OPERATOR_INITIAL_UNSCHEDULABLE: None}),
        SetUnschedulable("n1", True),
    ]
    (moved,) = [a for a in actions if isinstance(a, Transition)]
    assert (moved.source, moved.target) == (S.FAILED, S.VALIDATION_REQUIRED)
    assert moved.annotations[WAS_UNSCHEDULABLE] == "false" and moved.annotations[OPERATOR_INITIAL_UNSCHEDULABLE] is None
