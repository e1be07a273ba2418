"""When the world misbehaves mid-rollout (issue 11), end to end: the real Controller against the emulator
on a virtual clock, one pass per virtual second, judged by final node states, the emulator's request
history and the words a user sees (the status ConfigMap, node annotations, Events).

Here: a lost record of who cordoned a node, evictions the API server answers with 500, pods that come
back to a cordoned node, a state set by hand on a node in progress. Which nodes start and in what order
(domain order, budgets, driver DaemonSets, hand-set labels, autoUpgrade) is in test_disturbances_order.py,
which shares the harness (`World`) in disturbance_world.py. Section numbers are the issue's."""

from __future__ import annotations

import re

import pytest
from kubernetes import client as k8s

from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    FAILED_KIND,
    FAILED_REASON,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    SINCE_STATE,
    STATE_LABEL,
    STATE_SINCE,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.sim.apiserver.faults import RequestRecord
from upgrader.sim.controllers.settings import JOB_RUN_SECONDS, SimSettings
from upgrader.sim.fleets.builders import pinned_workload_pod, pod_object

from .disturbance_world import POLICY, ZONES, World, runbook_line

MORE_THAN_ONE_PDB = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."


def uncordons(requests: list[RequestRecord], node: str) -> list[RequestRecord]:
    return [
        r
        for r in requests
        if r.verb == "patch"
        and r.resource == "nodes"
        and r.name == node
        and isinstance(r.body, dict)
        and "unschedulable" in (r.body.get("spec") or {})
        and not r.body["spec"]["unschedulable"]
    ]


# ----- 3. a lost record of who cordoned the node --------------------------------------------------


@pytest.mark.parametrize(
    ("removed", "answer"),
    [
        ("was-unschedulable", None),  # the GPU Operator's record still says someone else cordoned it
        ("both records", "true"),
        ("both records", "false"),
    ],
)
def test_a_lost_cordon_record_keeps_a_foreign_cordon(removed: str, answer: str | None) -> None:
    w = World(POLICY, before=lambda w: w.patch_node("gpu-a-01", {"spec": {"unschedulable": True}}))
    if answer == "false":
        w.recorder.initially_cordoned.discard("gpu-a-01")  # the admin declares the cordon upgrader's below
    w.run_until(lambda: w.state("gpu-a-01") == State.POD_RESTART_REQUIRED.value)
    assert w.annotations("gpu-a-01")[WAS_UNSCHEDULABLE] == "true"
    gone: dict[str, str | None] = {WAS_UNSCHEDULABLE: None}
    if removed == "both records":
        gone[OPERATOR_INITIAL_UNSCHEDULABLE] = None
    w.annotate("gpu-a-01", gone)
    if answer is None:
        w.run_to_done()
        assert w.state("gpu-a-01") == State.DONE.value and w.cordoned("gpu-a-01")
        assert uncordons(w.cluster.requests, "gpu-a-01") == []
        assert w.recorder.check(w.policy, w.domain_of, "us-east-1a", ZONES) == []
        return
    w.run_until(lambda: w.annotations("gpu-a-01").get(BLOCKED_KIND) == "cordon-record", 60)
    status = w.run(20)
    assert w.state("gpu-a-01") == State.UNCORDON_REQUIRED.value and w.cordoned("gpu-a-01")
    assert uncordons(w.cluster.requests, "gpu-a-01") == [], "the foreign cordon was lifted"
    since = status["blocked"][0]["since"]
    expected = runbook_line("cordon-record-missing.md", node="gpu-a-01", time=since)
    assert status["phase"] == "Halted" and status["message"] == expected
    assert w.stored_status()[0] == expected
    assert w.annotations("gpu-a-01")[BLOCKED_REASON] == (
        f"no record says upgrader cordoned the node ({WAS_UNSCHEDULABLE} is missing), so it stays cordoned: "
        f"uncordon it yourself if upgrader cordoned it, or annotate {WAS_UNSCHEDULABLE}=false"
    )
    assert f"blocked in uncordon-required since {since}: {w.annotations('gpu-a-01')[BLOCKED_REASON]}; " \
        "see runbooks/cordon-record-missing.md" in w.events("gpu-a-01", "Warning")
    # The runbook's answer ends the block; the rollout goes on by itself.
    sent = len(w.cluster.requests)
    w.annotate("gpu-a-01", {WAS_UNSCHEDULABLE: answer})
    w.run_to_done()
    assert w.state("gpu-a-01") == State.DONE.value
    assert w.cordoned("gpu-a-01") == (answer == "true")
    assert bool(uncordons(w.ours(sent), "gpu-a-01")) == (answer == "false")
    assert uncordons(w.cluster.requests[:sent], "gpu-a-01") == []
    assert w.recorder.check(w.policy, w.domain_of, "us-east-1a", ZONES) == []


# ----- 4. evictions the API server answers with 500 -----------------------------------------------


def second_pdb(w: World) -> None:
    """A second budget over the training pods: every eviction of one is a 500, as kube-apiserver answers."""
    spec = {"selector": {"matchLabels": {"app": "llm-pretrain"}}, "minAvailable": 1}
    w.cluster.create("poddisruptionbudgets", {"metadata": {"name": "llm-pretrain-floor"}, "spec": spec},
                     "ml-training", "policy")


@pytest.mark.parametrize("on_timeout", ["drain", "halt", "fail"])
def test_evictions_answered_500_wait_with_the_error_then_time_out_on_time(on_timeout: str) -> None:
    policy = {**POLICY, "gpuPodDeletion": {"timeoutSeconds": 20}}
    if on_timeout == "drain":
        policy["drain"] = {"enable": True, "deleteEmptyDir": True}
    else:
        policy["onBlockedTimeout"] = on_timeout
    w = World(policy, before=second_pdb)
    w.run_until(lambda: w.state("gpu-a-01") == State.POD_DELETION_REQUIRED.value)
    entered = w.entered("gpu-a-01", State.POD_DELETION_REQUIRED)
    status = w.run(15)
    refused = [r for r in w.cluster.requests if r.subresource == "eviction" and r.name == "llm-pretrain-0"]
    assert refused and {r.status for r in refused} == {500}
    error = f"eviction of ml-training/llm-pretrain-0 failed: {MORE_THAN_ONE_PDB}"
    (waiting,) = [x for x in status["waiting"] if x["node"] == "gpu-a-01"]
    assert (waiting["state"], waiting["reason"]) == (State.POD_DELETION_REQUIRED.value, error)
    assert status["phase"] == "Running" and w.state("gpu-a-01") == State.POD_DELETION_REQUIRED.value
    w.run_until(lambda: bool(w.events("gpu-a-01", "Warning")), 10, "a Warning on gpu-a-01")
    warnings = w.events("gpu-a-01", "Warning")
    # A pass a second: the timeout fires in the pass 20 s after the node entered the state.
    fired = w.now - 1 - entered
    assert 20 <= fired < 21, fired
    past = f"{error} (past the 20s timeout)"
    marks = w.annotations("gpu-a-01")
    if on_timeout == "drain":
        assert w.state("gpu-a-01") == State.DRAIN_REQUIRED.value
        assert warnings == [f"GPU pod deletion cannot finish: {past}; drain.enable is set, so the node is drained"]
    elif on_timeout == "halt":
        assert w.state("gpu-a-01") == State.POD_DELETION_REQUIRED.value
        assert (marks[BLOCKED_KIND], marks[BLOCKED_REASON]) == ("pod-deletion", past)
        since = marks[BLOCKED_SINCE]
        assert f"blocked in pod-deletion-required since {since}: {past}; see runbooks/gpu-pod-deletion-blocked.md" \
            in warnings
    else:
        assert w.state("gpu-a-01") == State.FAILED.value
        assert marks[FAILED_KIND] == "pod-deletion"
        assert marks[FAILED_REASON] == f"not done within the 20s timeout: {error}"
        assert (
            f"upgrade failed in pod-deletion-required: not done within the 20s timeout: {error}; "
            "see runbooks/gpu-pod-deletion-blocked.md"
        ) in warnings
    status = w.run(2)
    assert status["phase"] == ("Running" if on_timeout == "drain" else "Halted"), status["message"]
    assert w.stored_status()[0] == status["message"]
    if on_timeout != "fail":  # once the second budget is gone the evictions go through
        k8s.PolicyV1Api(w.core.api_client).delete_namespaced_pod_disruption_budget("llm-pretrain-floor", "ml-training")
        w.run_to_done()
        assert {w.state(n) for n in w.info.nodes} == {State.DONE.value}
        assert w.recorder.check(w.policy, w.domain_of, "us-east-1a", ZONES) == []


# ----- 5. pods that keep coming back to a cordoned node -------------------------------------------


def pinned_job(w: World) -> None:
    """A Job whose pod holds a GPU and names gpu-a-01 in spec.nodeName: each evicted pod is replaced there."""
    pod = pod_object("x", "gpu-a-01", {"app": "pinned-train"}, "nvcr.io/nvidia/pytorch:24.05-py3", gpus=1)
    spec = {"completions": 1, "parallelism": 1, "template": {"metadata": {"labels": {"app": "pinned-train"}},
                                                            "spec": {**pod["spec"], "restartPolicy": "Never"}}}
    body = {"metadata": {"name": "pinned-train", "annotations": {JOB_RUN_SECONDS: "never"}}, "spec": spec}
    w.cluster.create("jobs", body, "ml-training", "batch")


def came_back(pod: str, state: str) -> str:
    return (
        f"{pod} came back to the node after it was cordoned (created after it entered {state}): something places "
        "them on it directly (nodeName, a pinned Job, a toleration), so evicting them again does not end"
    )


def job_pods(w: World) -> list[str]:
    pods = w.cluster.store.objects(w.cluster.type("pods"), "ml-training")
    return [f"ml-training/{p['metadata']['name']}" for p in pods if p["metadata"]["labels"]["app"] == "pinned-train"]


def test_a_pod_a_pinned_job_puts_back_is_named_and_the_deletion_times_out() -> None:
    # A Job controller replaces a pod at once (kube's starts as the old one terminates), so each pass finds one.
    sim = SimSettings(job_replace_delay=0)
    w = World({**POLICY, "gpuPodDeletion": {"timeoutSeconds": 20}}, before=pinned_job, sim=sim)
    w.run_until(lambda: w.state("gpu-a-01") == State.POD_DELETION_REQUIRED.value)
    entered = w.entered("gpu-a-01", State.POD_DELETION_REQUIRED)
    first = job_pods(w)
    status = w.run(5)
    (waiting,) = [x["reason"] for x in status["waiting"] if x["node"] == "gpu-a-01"]
    # Named by their Job: each return is another pod, evicted in turn.
    assert [p for p in job_pods(w) if p not in first], "the Job put its pod back"
    assert waiting == came_back("pods of Job ml-training/pinned-train", "pod-deletion-required")
    assert w.state("gpu-a-01") == State.POD_DELETION_REQUIRED.value
    w.run_until(lambda: BLOCKED_KIND in w.annotations("gpu-a-01"), 20, "the deletion's timeout")
    assert 20 <= w.now - 1 - entered < 21
    marks = w.annotations("gpu-a-01")
    assert marks[BLOCKED_KIND] == "pod-deletion"
    assert "came back to the node after it was cordoned" in marks[BLOCKED_REASON]
    assert marks[BLOCKED_REASON].endswith(" (past the 20s timeout)")
    status = w.run(2)
    assert status["phase"] == "Halted" and "came back to the node after it was cordoned" in status["message"]
    assert any("came back to the node" in m for m in w.events("gpu-a-01", "Warning"))
    assert w.cordoned("gpu-a-01")


def test_a_block_whose_pods_keep_coming_back_is_recorded_once() -> None:
    """Found writing these tests: the block named the newest returning pod, so its reason changed every
    pass (a node PATCH and a new Warning Event object each time). It names the pods' owner now."""
    sim = SimSettings(job_replace_delay=0)
    w = World({**POLICY, "gpuPodDeletion": {"timeoutSeconds": 20}}, before=pinned_job, sim=sim)
    w.run_until(lambda: BLOCKED_KIND in w.annotations("gpu-a-01"), 60, "the block")
    warnings, sent = len(w.events("gpu-a-01", "Warning")), len(w.cluster.requests)
    w.run(10)
    assert [r.verb for r in w.ours(sent) if r.resource == "nodes" and r.name == "gpu-a-01"] == []
    assert len(w.events("gpu-a-01", "Warning")) == warnings, "a new Warning Event object every pass"


def test_a_pod_put_back_after_the_deletion_ended_keeps_the_driver_from_restarting() -> None:
    """A slower controller: the Job's pod comes back a second after the old one is gone, the deletion has
    ended by then. The driver is never restarted under it; the block names it (not as come back)."""
    w = World({**POLICY, "gpuPodDeletion": {"timeoutSeconds": 20}}, before=pinned_job)
    drivers = w.driver_pods("gpu-a-01")
    w.run_until(lambda: BLOCKED_KIND in w.annotations("gpu-a-01"), 30, "the block")
    (back,) = job_pods(w)
    marks = w.annotations("gpu-a-01")
    assert w.state("gpu-a-01") == State.POD_RESTART_REQUIRED.value and marks[BLOCKED_KIND] == "gpu-pods"
    assert marks[BLOCKED_REASON] == f"1 pod still holds GPUs: {back}; the driver cannot unload under them"
    w.run(30)
    assert w.driver_pods("gpu-a-01") == drivers, "the driver was restarted"
    assert not [r for r in w.ours() if r.resource == "pods" and r.name in drivers]
    assert w.cluster.daemonsets.incidents == []


def pinned_web_pod(w: World) -> None:
    """A pod pinned to gpu-a-01 by a nodeSelector: its replacement waits for the node to be schedulable."""
    w.cluster.create("pods", pinned_workload_pod("pinned-web", "gpu-a-01", {}, "web"), "web")


def test_a_node_uncordoned_mid_drain_is_cordoned_again_and_what_came_back_is_named() -> None:
    # Every pod that lands on the node while it is uncordoned is drained: GPU pods come back as well.
    policy = {**POLICY, "drainEveryNode": True, "drain": {"enable": True, "deleteEmptyDir": True, "timeoutSeconds": 20}}
    w = World(policy, before=pinned_web_pod)
    w.run_until(lambda: w.state("gpu-a-01") == State.DRAIN_REQUIRED.value)
    entered = w.entered("gpu-a-01", State.DRAIN_REQUIRED)
    seen: set[str] = set()
    # Something (a remediation script, a person) uncordons the node again and again while it drains: the
    # pinned pod's replacement lands on it each time.
    while BLOCKED_KIND not in w.annotations("gpu-a-01") and w.now < entered + 30:
        if w.cordoned("gpu-a-01"):
            w.patch_node("gpu-a-01", {"spec": {"unschedulable": None}})
            w.cluster.store.run_due()  # the scheduler binds the pending replacement now
        status = w.step()
        seen |= {x["reason"] for x in status["waiting"] if x["node"] == "gpu-a-01"}
    assert 20 <= w.now - 1 - entered < 21, "the drain timed out on time"
    back = "came back to the node after it was cordoned (created after it entered drain-required)"
    assert any(re.search(rf"pods of ReplicaSet web/pinned-web {re.escape(back)}", r) for r in seen), seen
    again = "cordoned again: someone uncordoned the node in drain-required, before its upgrade ended"
    assert again in w.events("gpu-a-01", "Warning")
    marks = w.annotations("gpu-a-01")
    assert marks[BLOCKED_KIND] == "drain" and "came back to the node after it was cordoned" in marks[BLOCKED_REASON]
    assert marks[WAS_UNSCHEDULABLE] == "false", "the cordon put back is upgrader's"
    assert w.cordoned("gpu-a-01")
    # Left alone, the replacement waits for the node, the drain ends and so does the rollout.
    w.run_to_done()
    assert not w.cordoned("gpu-a-01") and w.state("gpu-a-01") == State.DONE.value


# ----- 10. a state set by hand on a node in progress ----------------------------------------------


def guarded_pod(w: World, node: str) -> None:
    """A GPU pod put on the node with spec.nodeName, behind a budget that refuses every eviction."""
    spec = {"selector": {"matchLabels": {"app": "critical-finetune"}}, "minAvailable": 1}
    w.cluster.create("poddisruptionbudgets", {"metadata": {"name": "critical-finetune"}, "spec": spec},
                     "ml-training", "policy")
    pod = pod_object("critical-finetune-0", node, {"app": "critical-finetune"}, "nvcr.io/nvidia/nemo:24.05", 4,
                     ("apps/v1", "StatefulSet", "critical-finetune"))
    w.cluster.create("pods", pod, "ml-training")


def test_a_state_set_by_hand_halts_then_counts_its_waits_from_when_a_person_lets_it_go_on() -> None:
    """pod-deletion-required set on a node whose clock was for validation-required two minutes before:
    upgrader halts naming the change (it does not go on from a state it did not set); a person lets it go
    on from there (since-state set, the clock removed), and its waits count from then."""
    policy = {**POLICY, "validation": {"timeoutSeconds": 600}, "gpuPodDeletion": {"timeoutSeconds": 20},
              "drain": {"enable": True}}
    w = World(policy, scenario="validation-failure")
    node = w.info.broken_validation_node
    assert node is not None
    w.run_until(lambda: w.state(node) == State.VALIDATION_REQUIRED.value)
    w.run(120)
    assert w.state(node) == State.VALIDATION_REQUIRED.value
    guarded_pod(w, node)
    w.label(node, STATE_LABEL, State.POD_DELETION_REQUIRED.value)
    w.run(5)
    change = "its state label was moved from validation-required to pod-deletion-required by someone else"
    warned = [e for e in w.events(node, "Warning") if change in e]
    assert len(warned) == 2 and warned[0].startswith("blocked in pod-deletion-required since "), warned
    assert warned[1].startswith("rollout halted: "), "one Warning for the block, one for the halt"
    assert w.state(node) == State.POD_DELETION_REQUIRED.value and w.status["phase"] == "Halted"
    w.annotate(node, {SINCE_STATE: State.POD_DELETION_REQUIRED.value, STATE_SINCE: None})
    hand = w.now
    w.run(1)
    assert (
        "the clock of pod-deletion-required (gpu-upgrader.io/state-since) was missing or unreadable: "
        "its waits count from now"
    ) in w.events(node, "Warning")
    w.run_until(lambda: w.state(node) == State.DRAIN_REQUIRED.value, 40, "the fallback to a drain")
    drained = w.entered(node, State.DRAIN_REQUIRED, after=hand)
    assert 20 <= drained - hand < 22, "no fallback to a drain on the clock of another state"
    # Meanwhile the refusal blocked the node, as any refusal does within its timeout.
    kinds = {r.annotations.get(BLOCKED_KIND) for r in w.recorder.records if r.node == node and hand < r.time < drained}
    assert "pdb" in kinds
    assert (
        "GPU pod deletion cannot finish: eviction of ml-training/critical-finetune-0 refused by PodDisruptionBudget "
        "ml-training/critical-finetune (disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1); drain.enable is "
        "set, so the node is drained"
    ) in w.events(node, "Warning")
