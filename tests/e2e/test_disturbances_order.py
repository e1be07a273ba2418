"""Which nodes start, and in what order, when the world misbehaves mid-rollout (issue 11), end to end on
the emulator's virtual clock (see disturbance_world.py for the harness).

The failure-domain order broken with nodes of one domain in progress: the controller restarts with
another order, a zone label changes, a node asks for the upgrade in a finished domain, the driver
DaemonSets are rolled back, or two replicas with different orders share the Lease. Whatever happens,
no node of another domain starts while a node of the domain being upgraded is in progress, and the
rollout ends Done. Three nodes a domain and maxParallelUpgrades 2: a domain's third node waits for a
slot, so a scheduler that took the wrong domain when a slot freed would start a node beside the domain
still in progress.

Then the fleet changing under the rollout: a bogus state label, a deleted or a doubled driver
DaemonSet, upgrade-done set by hand, autoUpgrade turned off."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.shown import shown
from upgrader.commands.cli import main
from upgrader.core.model.states import BLOCKED_KIND, BLOCKED_SINCE, REQUESTED_ANNOTATION, STATE_LABEL, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.builders import KERNELS, OLD_DRIVER, OPERATOR_NS, OS_TAG, driver_template, node_object
from upgrader.sim.proving.invariants import RolloutRecorder, lease_handovers

from .disturbance_world import IN_PROGRESS_VALUES, POLICY, ZONE_LABEL, ZONES, World, runbook_line, starts_after

# ----- 1. the domain order broken mid-rollout ------------------------------------------------------

REVERSED = {**POLICY, "failureDomains": {"order": ZONES[::-1]}}  # us-east-1c first, and the canary


def zones_now(w: World) -> dict[str, str]:
    nodes = w.cluster.store.objects(w.cluster.type("nodes"))
    return {n["metadata"]["name"]: n["metadata"]["labels"][ZONE_LABEL] for n in nodes}


def mixed_starts(recorder: RolloutRecorder, domain_of: dict[str, str]) -> list[str]:
    """Every start while a node of another domain was in progress."""
    state: dict[str, str | None] = {}
    out = []
    for r in recorder.records:
        started = state.get(r.node) == State.UPGRADE_REQUIRED.value and r.state == State.CORDON_REQUIRED.value
        state[r.node] = r.state
        if started:
            busy = sorted(n for n, s in state.items() if s in IN_PROGRESS_VALUES and domain_of[n] != domain_of[r.node])
            if busy:
                out.append(f"rv {r.rv}: {r.node} ({domain_of[r.node]}) started while {busy} were in progress")
    return out


def domains_started(recorder: RolloutRecorder, domain_of: dict[str, str]) -> list[str]:
    """The domains in the order their first node started."""
    out: list[str] = []
    for start in recorder.starts():
        if domain_of[start.node] not in out:
            out.append(domain_of[start.node])
    return out


def on_b(w: World) -> bool:
    """Domain a is done; nodes of us-east-1b are in progress and its third one waits for a slot."""
    return any(w.state(n) in IN_PROGRESS_VALUES and w.cordoned(n) for n in w.info.domains["us-east-1b"])


# Each disturbance, applied with nodes of us-east-1b in progress, gives the domain order from then on
# and the domains that start nodes in it.
Order = tuple[list[str], list[str]]


def restart_with_another_order(w: World) -> Order:
    w.policy = policy_from_mapping(REVERSED)
    w.controller = w.new_controller(w.policy)
    return ["us-east-1b", "us-east-1c"], ["us-east-1b", "us-east-1c"]


def relabel_a_zone(w: World) -> Order:
    w.label("gpu-b-02", ZONE_LABEL, "us-east-1c")  # in progress: it now belongs to the next domain
    return ["us-east-1b", "us-east-1c"], ["us-east-1b", "us-east-1c"]


def request_in_a_finished_domain(w: World) -> Order:
    """A node joins domain a, done already, asking for the upgrade (its driver pod is current)."""
    node = node_object("gpu-a-04", "us-east-1a", KERNELS[0], "NVIDIA-H100-80GB-HBM3", 9)
    node["metadata"]["annotations"] = {REQUESTED_ANNOTATION: "true"}
    w.cluster.create("nodes", node)  # the kubelet registers it
    order = ["us-east-1b", "us-east-1a", "us-east-1c"]
    return order, order


def undo_the_driver_rollout(w: World) -> Order:
    """`kubectl rollout undo`: each driver DaemonSet's template back to the old driver, a new revision.
    Domain a (done) is behind again; gpu-b-03 and domain c, never upgraded, are current without a start."""
    for name in w.info.driver_daemonsets:
        kernel = name.removeprefix("nvidia-driver-daemonset-").removesuffix(f"-{OS_TAG}")
        undo = {"spec": {"template": driver_template(kernel, OLD_DRIVER)}}
        w.apps.patch_namespaced_daemon_set(name, OPERATOR_NS, undo)
    return ["us-east-1b", "us-east-1a"], ["us-east-1a"]


DISTURBANCES: dict[str, Callable[[World], Order]] = {
    "order changed": restart_with_another_order,
    "zone relabelled": relabel_a_zone,
    "node requested": request_in_a_finished_domain,
    "rollout undone": undo_the_driver_rollout,
}


@pytest.mark.parametrize("disturbance", list(DISTURBANCES))
def test_no_domain_starts_beside_the_one_in_progress(disturbance: str) -> None:
    w = World(POLICY, nodes=9)
    w.run_until(lambda: on_b(w))
    assert {w.state(n) for n in w.info.domains["us-east-1a"]} == {State.DONE.value}
    assert w.state("gpu-b-03") == State.UPGRADE_REQUIRED.value, "the third node waits for a slot"
    order, started = DISTURBANCES[disturbance](w)
    after = RolloutRecorder(w.cluster)
    after.initially_cordoned = set(w.recorder.initially_cordoned)  # b's cordons now are upgrader's own
    messages: list[str] = []
    while w.status.get("phase") != "Done" and len(messages) < 400:
        messages.append(w.step()["message"])
    assert w.status["phase"] == "Done", w.status["message"]
    domain_of = zones_now(w)
    assert mixed_starts(after, domain_of) == []
    assert domains_started(after, domain_of) == started
    assert after.check(w.policy, domain_of, None, order) == []
    assert {w.state(n) for n in domain_of} == {State.DONE.value}
    assert not any(w.cordoned(n) for n in domain_of)
    if disturbance == "zone relabelled":
        assert (
            "nodes of domain us-east-1c are in progress while the rollout is on domain us-east-1b (the order, a "
            "zone label or the fleet changed mid-rollout): no node starts until they finish; in progress: gpu-b-02"
        ) in messages
    if disturbance == "rollout undone":
        for node in domain_of:
            (pod,) = w.driver_pods(node)
            image = w.get("pods", pod, OPERATOR_NS)["spec"]["containers"][0]["image"]
            assert f":{OLD_DRIVER.split('.')[0]}-" in image, (node, image)


def holder(w: World) -> str | None:
    lease = w.cluster.get("leases", "gpu-driver-upgrader", OPERATOR_NS, "coordination.k8s.io") or {}
    name: Any = (lease.get("spec") or {}).get("holderIdentity")
    return name


def test_two_replicas_with_different_orders_never_upgrade_two_domains_at_once() -> None:
    """Two replicas share the Lease, one with the canary first, one with the order reversed (a half-applied
    change of the policy ConfigMap). The leader stalls for 8 s every 12 s (long GC pauses), so the other
    takes the Lease and leads on with its own order."""
    w = World(POLICY, nodes=9)
    replicas = [w.new_controller(w.policy, "east", 5.0), w.new_controller(policy_from_mapping(REVERSED), "west", 5.0)]
    acted: list[str] = []
    stalled: str | None = None
    for second in range(600):
        if second % 12 == 0:
            stalled = holder(w)
        elif second % 12 == 8:
            stalled = None
        for replica in replicas:
            if replica.settings.identity != stalled:
                report = replica.reconcile()
                if report.acted:
                    w.status = shown(report.status) or w.status
                    acted.append(replica.settings.identity)
        if w.status.get("phase") == "Done":
            break
        w.cluster.advance(1)
    assert w.status.get("phase") == "Done", w.status.get("message")
    assert set(acted) == {"east", "west"} and lease_handovers(w.cluster) >= 3, "both replicas led, in turns"
    order = domains_started(w.recorder, w.domain_of)
    assert order[0] == "us-east-1a" and sorted(order) == ZONES
    assert mixed_starts(w.recorder, w.domain_of) == []
    assert w.recorder.check(w.policy, w.domain_of, None, order) == []
    assert {w.state(n) for n in w.info.nodes} == {State.DONE.value}


# ----- 2. a bogus state label ---------------------------------------------------------------------


def cordoned_by_us_at_once(world: World) -> int:
    """The most nodes cordoned at one time, nodes cordoned before the rollout aside."""
    cordoned: dict[str, bool] = {}
    most = 0
    for r in world.recorder.records:
        cordoned[r.node] = r.unschedulable and r.node not in world.recorder.initially_cordoned
        most = max(most, sum(cordoned.values()))
    return most


def test_a_bogus_state_label_on_a_cordoned_node_does_not_free_the_budget() -> None:
    w = World({**POLICY, "maxUnavailable": 1})
    w.run_until(lambda: w.state("gpu-a-01") == State.POD_DELETION_REQUIRED.value and w.cordoned("gpu-a-01"))
    assert w.state("gpu-a-02") == State.UPGRADE_REQUIRED.value
    w.label("gpu-a-01", STATE_LABEL, "bogus")
    relabelled, sent = w.now, len(w.cluster.requests)
    status = w.run(90)
    assert starts_after(w, relabelled) == [], "a node started while the relabelled node held the budget"
    assert cordoned_by_us_at_once(w) == 1
    assert status["phase"] == "Running"
    assert status["message"] == (
        "maxUnavailable 1 reached: gpu-a-01 (invalid, cordoned by upgrader); fix what makes it invalid or raise "
        "maxUnavailable; see runbooks/rollout-halted.md"
    )
    assert status["waiting_on"]["nodes"] == [{"node": "gpu-a-01", "why": "invalid, cordoned by upgrader"}]
    reason = f"label {STATE_LABEL}: unknown upgrade state 'bogus'"
    assert status["invalid"] == [{"node": "gpu-a-01", "reason": reason}]
    assert w.stored_status()[1]["invalid"] == status["invalid"]
    assert w.state("gpu-a-01") == "bogus" and w.cordoned("gpu-a-01")
    assert [r for r in w.ours(sent) if r.resource == "nodes" and r.name == "gpu-a-01"] == [], "it touched the node"
    assert w.recorder.check(w.policy, w.domain_of, "us-east-1a", ZONES) == []
    # Put back as it was, the node finishes and the rollout goes on.
    w.label("gpu-a-01", STATE_LABEL, State.POD_DELETION_REQUIRED.value)
    w.run_to_done()
    assert {n: w.state(n) for n in w.info.nodes} == dict.fromkeys(w.info.nodes, State.DONE.value)
    assert not any(w.cordoned(n) for n in w.info.nodes)
    assert w.recorder.check(w.policy, w.domain_of, "us-east-1a", ZONES) == []


# ----- 6. the driver DaemonSet deleted mid-rollout ------------------------------------------------


def test_a_deleted_driver_daemonset_holds_its_nodes_until_it_is_restored() -> None:
    w = World(POLICY)
    w.run_until(lambda: w.state("gpu-b-01") == State.VALIDATION_REQUIRED.value)
    kept = w.driver_daemonset("gpu-b-01")
    owner = kept["metadata"]["name"]
    served = [n for n in w.info.nodes if any(p.startswith(owner) for p in w.driver_pods(n))]
    assert len(served) == 3 and "gpu-b-01" in served
    w.apps.delete_namespaced_daemon_set(owner, OPERATOR_NS)  # its pods go with it (background cascade)
    deleted, states = w.now, {n: w.state(n) for n in w.info.nodes}
    status = w.run(30)
    # gpu-b-01 stays where it was, cordoned and listed: its driver can be neither restarted nor validated.
    assert w.state("gpu-b-01") == State.VALIDATION_REQUIRED.value and w.cordoned("gpu-b-01")
    marks = w.annotations("gpu-b-01")
    assert marks[BLOCKED_KIND] == "driver-daemonset"
    since = marks[BLOCKED_SINCE]
    expected = runbook_line("driver-daemonset-missing.md", node="gpu-b-01", state="validation-required", time=since)
    assert status["phase"] == "Halted" and status["message"] == expected
    assert w.stored_status()[0] == expected
    assert "gpu-b-01" in [x["node"] for x in status["in_progress"]]
    assert [(b["node"], b["kind"], b["runbook"]) for b in status["blocked"]] == [
        ("gpu-b-01", "driver-daemonset", "runbooks/driver-daemonset-missing.md")
    ]
    # No node whose driver pod went with the DaemonSet was marked done, or moved at all.
    assert [n for n in w.info.nodes if not w.driver_pods(n)] == served
    moved = [(r.node, r.state) for r in w.recorder.records if r.time >= deleted and r.node in served
             and r.state != states[r.node]]
    assert moved == []
    # Applied again (the GPU Operator re-renders it), the DaemonSet brings the drivers back; the rollout ends.
    body = {"metadata": {"name": owner, "labels": kept["metadata"]["labels"]}, "spec": kept["spec"]}
    w.cluster.create("daemonsets", body, OPERATOR_NS, "apps")
    w.run_to_done()
    assert {n: w.state(n) for n in w.info.nodes} == dict.fromkeys(w.info.nodes, State.DONE.value)
    assert not any(w.cordoned(n) for n in w.info.nodes)
    assert w.recorder.check(w.policy, w.domain_of, "us-east-1a", ZONES) == []


# ----- 7. a node two driver DaemonSets select ------------------------------------------------------

PINNED_DS = "nvidia-driver-daemonset-gpu-b-01"


def second_driver_daemonset(w: World) -> None:
    """A copy of gpu-b-01's driver DaemonSet that selects gpu-b-01 only (a hand-made hotfix, left behind)."""
    original = w.driver_daemonset("gpu-b-01")
    template = copy.deepcopy(original["spec"]["template"])
    template["metadata"]["labels"]["pinned"] = "gpu-b-01"
    template["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "gpu-b-01"
    selector = {"matchLabels": {**original["spec"]["selector"]["matchLabels"], "pinned": "gpu-b-01"}}
    body = {"metadata": {"name": PINNED_DS, "labels": original["metadata"]["labels"]},
            "spec": {**original["spec"], "selector": selector, "template": template}}
    w.cluster.create("daemonsets", body, OPERATOR_NS, "apps")
    w.cluster.advance(2)  # its pod comes up beside the other one


def test_a_node_two_driver_daemonsets_select_is_never_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = World(POLICY, before=second_driver_daemonset)
    pods = w.driver_pods("gpu-b-01")
    assert len(pods) == 2
    (other,) = {n.rsplit("-", 1)[0] for n in pods} - {PINNED_DS}
    reason = (
        f"selected by 2 driver DaemonSets ({', '.join(sorted([other, PINNED_DS]))}): their driver pods would "
        "replace each other; make their node selectors exclusive"
    )
    # The preflight says so first: `upgrader plan --dry-run` against the cluster.
    w.cluster.serve()
    try:
        kubeconfig = w.cluster.write_kubeconfig(tmp_path / "kubeconfig")
        assert main(["plan", "--dry-run", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 1
    finally:
        w.cluster.stop()
    plan = json.loads(capsys.readouterr().out)
    found = [(f["node"], f["severity"], f["message"]) for f in plan["findings"]
             if f["kind"] == "conflicting-driver-daemonsets"]
    assert found == [("gpu-b-01", "blocking", reason)]
    status = w.run_to_done()
    assert status["invalid"] == [{"node": "gpu-b-01", "reason": reason}]
    assert status["message"] == "done: 5 of 5 nodes upgraded; 1 invalid, not upgraded: gpu-b-01"
    assert w.stored_status()[1]["invalid"] == status["invalid"]
    assert "gpu-b-01" not in [s.node for s in w.recorder.starts()]
    assert STATE_LABEL not in w.node("gpu-b-01")["metadata"]["labels"] and not w.cordoned("gpu-b-01")
    # Neither of its driver pods was deleted or evicted by us: whatever churn there is, it is not ours.
    assert w.driver_pods("gpu-b-01") == pods
    assert [r for r in w.ours() if r.resource == "pods" and r.name in pods] == []
    assert [r for r in w.ours() if r.resource == "nodes" and r.name == "gpu-b-01" and r.verb == "patch"] == []
    others = [n for n in w.info.nodes if n != "gpu-b-01"]
    assert {w.state(n) for n in others} == {State.DONE.value}


# ----- 8. upgrade-done set by hand on a validating node -------------------------------------------


def test_upgrade_done_set_by_hand_on_a_validating_node_is_validated_then_uncordoned() -> None:
    w = World(POLICY, sim=SimSettings(validator_ready_delay=20))  # validation takes a while
    w.run_until(lambda: w.state("gpu-a-01") == State.VALIDATION_REQUIRED.value)
    w.label("gpu-a-01", STATE_LABEL, State.DONE.value)
    hand = w.now
    w.run_to_done()
    seen = [r.state for r in w.recorder.records if r.node == "gpu-a-01" and r.time >= hand]
    path = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]
    assert path == ["upgrade-done", "validation-required", "uncordon-required", "upgrade-done"]
    assert not w.cordoned("gpu-a-01"), "left cordoned"
    assert (
        "Successfully updated node state label to validation-required (from upgrade-done): labelled upgrade-done "
        "before its upgrade ended (gpu-upgrader.io/started-at is still set): validating the node, then uncordoning it"
    ) in w.events("gpu-a-01", "Normal")
    assert w.recorder.check(w.policy, w.domain_of, "us-east-1a", ZONES) == []


# ----- 9. autoUpgrade turned off mid-rollout ------------------------------------------------------


def test_auto_upgrade_false_mid_rollout_lets_nodes_in_progress_finish_and_starts_none() -> None:
    w = World(POLICY)
    w.run_until(lambda: w.state("gpu-a-01") == w.state("gpu-a-02") == State.POD_DELETION_REQUIRED.value)
    w.controller = w.new_controller(policy_from_mapping({**POLICY, "autoUpgrade": False}))  # restarted with it
    off = w.now
    status = w.run(90)
    for node in ("gpu-a-01", "gpu-a-02"):
        assert w.state(node) == State.DONE.value and not w.cordoned(node)
    assert {w.state(n) for n in w.info.nodes if not n.startswith("gpu-a")} == {State.UPGRADE_REQUIRED.value}
    assert starts_after(w, off) == []
    assert (status["phase"], status["message"]) == ("Paused", "autoUpgrade is false in the policy")
    assert w.stored_status()[0] == "autoUpgrade is false in the policy"
    assert w.recorder.check(w.policy, w.domain_of, "us-east-1a", ZONES) == []
