"""The GPU Operator's upgrade behaviour a migrating user relies on, end to end: the controller over
HTTP against the emulator, real kubectl where a user would type it, judged by node states, the
emulator's request history and what the driver saw (`incidents`: a driver stopped under GPU pods).
On the emulator's virtual clock: the controller's passes a virtual second apart (conftest
`rollout(..., virtual=True)`), so the waits and timeouts cost no wall time."""

from __future__ import annotations

from typing import Any

from upgrader.core.model.states import (
    DRAIN_SKIP_LABEL,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OPERATOR_WAIT_START,
    SKIP_LABEL,
    STATE_LABEL,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.sim.fleets.builders import DRIVER_REPO, add_dra_pod, driver_tag, partition_mig, pinned_workload_pod
from upgrader.sim.fleets.scenarios import UNBUILT_KERNEL

from .conftest import FAST_POLICY, Rollout

MIG = "nvidia.com/mig-1g.10gb"
OPERATOR = "gpu-operator"
ORDER = ["us-east-1a", "us-east-1b", "us-east-1c"]


def states_seen(r: Rollout, node: str) -> list[str | None]:
    seen: list[str | None] = []
    for record in r.recorder.records:
        if record.node == node and (not seen or seen[-1] != record.state):
            seen.append(record.state)
    return seen


def driver_pod(r: Rollout, node: str) -> dict[str, Any]:
    (pod,) = [
        p
        for p in r.cluster.store.objects(r.cluster.type("pods"), OPERATOR)
        if p["spec"].get("nodeName") == node
        and p["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"
        and not p["metadata"].get("deletionTimestamp")
    ]
    return pod


def first(r: Rollout, **match: str | int) -> int:
    return min(q.seq for q in r.cluster.requests if all(getattr(q, k) == v for k, v in match.items()))


def test_mig_and_dra_pods_are_gone_before_the_driver_pod_is_deleted(rollout: Any) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    partition_mig(r.cluster, "gpu-a-01")
    r.cluster.create("pods", pinned_workload_pod("mig-infer", "gpu-a-01", {MIG: "1"}), "ml-training")
    add_dra_pod(r.cluster, "gpu-a-01")
    old_driver = driver_pod(r, "gpu-a-01")["metadata"]["name"]
    r.run_until(("Done",), timeout=90)
    deleted = first(r, method="DELETE", resource="pods", namespace=OPERATOR, name=old_driver)
    for name in ("mig-infer", "dra-train"):
        evicted = first(r, subresource="eviction", name=name, status=201)
        assert evicted < deleted, f"{name} evicted (request {evicted}) after the driver pod was deleted ({deleted})"
    assert r.cluster.daemonsets.incidents == [], "a driver restarted under a MIG or DRA pod"
    assert r.node("gpu-a-01")["metadata"]["labels"][STATE_LABEL] == State.DONE.value
    assert r.recorder.check(r.policy, r.domain_of, "us-east-1a", ORDER) == []
    claims = r.kubectl("get", "resourceclaims", "-A")
    assert claims.split("\n")[0].split() == ["NAMESPACE", "NAME", "STATE", "AGE"]
    assert "dra-train-gpu" in claims and "allocated" in claims


def test_with_drain_enabled_a_node_whose_gpu_pods_went_is_never_drained(rollout: Any) -> None:
    policy = {**FAST_POLICY, "drain": {"enable": True, "deleteEmptyDir": True}}
    r: Rollout = rollout("healthy", policy, virtual=True)
    bystanders = {
        p["metadata"]["uid"]: p["metadata"]["name"]
        for p in r.cluster.store.objects(r.cluster.type("pods"), "web")  # api-gateway: no GPU
    }
    r.run_until(("Done",), timeout=90)
    assert not any(rec.state == State.DRAIN_REQUIRED.value for rec in r.recorder.records)
    survivors = {p["metadata"]["uid"] for p in r.cluster.store.objects(r.cluster.type("pods"), "web")}
    assert survivors == set(bystanders), "a pod holding no GPU was evicted"
    assert not any(q.subresource == "eviction" and q.namespace == "web" for q in r.cluster.requests)
    messages = [e["message"] for e in r.events_for("gpu-a-01")]
    assert "Deleted workload pods on the node for the driver upgrade" in messages
    assert (
        "Successfully updated node state label to pod-restart-required (from pod-deletion-required)" in messages
    )


def test_gpu_pods_the_deletion_may_not_touch_are_drained_instead(rollout: Any) -> None:
    policy = {**FAST_POLICY, "drain": {"enable": True, "force": True, "podSelector": "app=scratch"}}
    r: Rollout = rollout("healthy", policy, virtual=True)
    bare = pinned_workload_pod("scratch", "gpu-b-01", {"nvidia.com/gpu": "1"}, "batch")
    bare["metadata"].pop("ownerReferences")  # no controller: gpuPodDeletion.force is off
    r.cluster.create("pods", bare, "batch")
    kept = pinned_workload_pod("scratch-cache", "gpu-b-01", {}, "batch")
    kept["metadata"]["labels"] = {"app": "scratch"}  # the drain selects it ...
    kept_uid = r.cluster.create("pods", kept, "batch")["metadata"]["uid"]
    r.kubectl("-n", "batch", "label", "pod", "scratch-cache", f"{DRAIN_SKIP_LABEL}=true")  # ... but it opts out
    r.run_until(("Done",), timeout=90)
    assert State.DRAIN_REQUIRED.value in states_seen(r, "gpu-b-01")
    assert r.cluster.get("pods", "scratch", "batch") is None
    assert (r.cluster.get("pods", "scratch-cache", "batch") or {}).get("metadata", {}).get("uid") == kept_uid
    assert all(State.DRAIN_REQUIRED.value not in states_seen(r, n) for n in r.info.nodes if n != "gpu-b-01")
    warnings = [e["message"] for e in r.events_for("gpu-b-01") if e["type"] == "Warning"]
    assert any(m.startswith("GPU pod deletion cannot finish: cannot evict: batch/scratch") for m in warnings)
    assert "Successfully drained the node" in [e["message"] for e in r.events_for("gpu-b-01")]
    assert r.cluster.daemonsets.incidents == []


def test_a_rollout_the_gpu_operator_left_half_done_is_taken_over(rollout: Any) -> None:
    """The Operator stopped with gpu-a-01 (cordoned by an admin before it started) waiting for its
    driver restart, and gpu-a-02 (cordoned by the Operator) 1 s into its wait for jobs."""
    r: Rollout = rollout("healthy", virtual=True)
    r.kubectl("cordon", "gpu-a-01")
    for namespace, pod in (("inference", "triton-0"), ("ml-training", "llm-pretrain-0")):  # the Operator's evictions
        r.kubectl("-n", namespace, "delete", "pod", pod, "--wait=false")
    r.kubectl("label", "node", "gpu-a-01", f"{STATE_LABEL}=pod-restart-required")
    r.kubectl("annotate", "node", "gpu-a-01", f"{OPERATOR_INITIAL_UNSCHEDULABLE}=true")
    r.kubectl("cordon", "gpu-a-02")
    r.kubectl("label", "node", "gpu-a-02", f"{STATE_LABEL}=wait-for-jobs-required")
    started = int(r.cluster.store.clock.now()) - 1
    r.kubectl("annotate", "node", "gpu-a-02", f"{OPERATOR_WAIT_START}={started}")
    # The runbook's step: the Operator's own cordons carry no mark, so they are marked as the Operator's.
    r.kubectl("annotate", "node", "gpu-a-02", f"{WAS_UNSCHEDULABLE}=false")
    r.recorder.initially_cordoned.discard("gpu-a-02")  # the Operator's own cordon: ours to lift
    r.run_until(("Done",), timeout=90)
    kept, lifted = r.node("gpu-a-01"), r.node("gpu-a-02")
    assert kept["metadata"]["labels"][STATE_LABEL] == lifted["metadata"]["labels"][STATE_LABEL] == "upgrade-done"
    assert kept["spec"].get("unschedulable") is True, "the admin's cordon was lifted"
    assert not lifted["spec"].get("unschedulable"), "the Operator's cordon was left in place"
    for marks in (kept["metadata"]["annotations"], lifted["metadata"]["annotations"]):
        assert OPERATOR_INITIAL_UNSCHEDULABLE not in marks and OPERATOR_WAIT_START not in marks
    adopted = [e["message"] for e in r.events_for("gpu-a-02") if e["message"].startswith("adopted")]
    assert adopted and f"its {OPERATOR_WAIT_START} timer" in adopted[0]
    assert r.cluster.daemonsets.incidents == []
    shown = r.kubectl("get", "nodes", "-L", STATE_LABEL, "--no-headers")
    assert all(line.split()[-1] == "upgrade-done" for line in shown.strip().splitlines())


def test_a_skipped_node_behind_carries_upgrade_required_and_is_never_started(rollout: Any) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    r.kubectl("label", "node", "gpu-c-02", f"{SKIP_LABEL}=true")
    before = driver_pod(r, "gpu-c-02")["metadata"]["uid"]
    status = r.run_until(("Done",), timeout=90)
    assert r.node("gpu-c-02")["metadata"]["labels"][STATE_LABEL] == State.UPGRADE_REQUIRED.value
    assert states_seen(r, "gpu-c-02") == [None, State.UPGRADE_REQUIRED.value]
    assert driver_pod(r, "gpu-c-02")["metadata"]["uid"] == before
    assert status["skipped"] == ["gpu-c-02"]


def _fail_on_the_missing_image(r: Rollout) -> str:
    (broken,) = [n for n in r.info.nodes if r.node(n)["status"]["nodeInfo"]["kernelVersion"] == UNBUILT_KERNEL]
    status = r.run_until(("Halted",), timeout=60, hold=0.5)
    assert status["failed"][0]["node"] == broken
    return broken


def test_a_failed_node_recovers_once_its_image_is_published(rollout: Any) -> None:
    r: Rollout = rollout("missing-image", virtual=True)
    broken = _fail_on_the_missing_image(r)
    r.cluster.settings.registry[DRIVER_REPO].add(driver_tag("550.90.07", UNBUILT_KERNEL))  # the kubelet retries
    r.run_until(("Done",), timeout=90)
    assert states_seen(r, broken)[-4:] == ["upgrade-failed", "validation-required", "uncordon-required", "upgrade-done"]
    assert not r.node(broken)["spec"].get("unschedulable")
    assert r.recorder.check(r.policy, r.domain_of, "us-east-1a", ORDER, failures_acknowledged=True) == []


def test_a_failed_node_recovers_after_its_daemonset_is_fixed(rollout: Any) -> None:
    """The runbook's way: point the DaemonSet at an image that exists, delete the failing pod (OnDelete)."""
    r: Rollout = rollout("missing-image", virtual=True)
    broken = _fail_on_the_missing_image(r)
    failing = driver_pod(r, broken)
    (owner,) = failing["metadata"]["ownerReferences"]
    r.cluster.settings.registry[DRIVER_REPO].add("550-hotfix")
    fixed = f"nvidia-driver-ctr={DRIVER_REPO}:550-hotfix"
    r.kubectl("-n", OPERATOR, "set", "image", f"daemonset/{owner['name']}", fixed)
    r.kubectl("-n", OPERATOR, "delete", "pod", failing["metadata"]["name"], "--wait=false")
    r.run_until(("Done",), timeout=90)
    assert r.node(broken)["metadata"]["labels"][STATE_LABEL] == State.DONE.value
    assert driver_pod(r, broken)["spec"]["containers"][0]["image"].endswith(":550-hotfix")
    assert State.VALIDATION_REQUIRED.value in states_seen(r, broken)[states_seen(r, broken).index("upgrade-failed") :]


def test_a_node_that_failed_validation_stays_failed_while_its_driver_is_unchanged(rollout: Any) -> None:
    r: Rollout = rollout("validation-failure", virtual=True)
    status = r.run_until(("Halted",), timeout=60, hold=3.0)
    (failure,) = status["failed"]
    assert failure["state"] == State.VALIDATION_REQUIRED.value
    assert r.node(failure["node"])["metadata"]["labels"][STATE_LABEL] == State.FAILED.value
    assert states_seen(r, failure["node"])[-1] == State.FAILED.value


def test_a_template_change_that_installs_nothing_restarts_the_driver_under_its_gpu_pods(rollout: Any) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    r.run_until(("Done",), timeout=90)
    gpu_pods = {
        p["metadata"]["uid"]
        for p in r.cluster.store.objects(r.cluster.type("pods"))
        if p["metadata"]["namespace"] in ("ml-training", "inference")
    }
    for ds in r.info.driver_daemonsets:  # a label on the template: a new revision, the same digest
        label = '{"spec":{"template":{"metadata":{"labels":{"team":"gpu"}}}}}'
        r.kubectl("-n", OPERATOR, "patch", "daemonset", ds, "-p", label)
    marks = len(r.recorder.records)
    r.reports.clear()
    r.run_until(("Done",), timeout=90, hold=1.0)
    after = [rec for rec in r.recorder.records[marks:]]
    assert {rec.node for rec in after if rec.state == State.POD_RESTART_REQUIRED.value} == set(r.info.nodes)
    assert not any(rec.state in ("wait-for-jobs-required", "pod-deletion-required", "drain-required") for rec in after)
    assert all(rec.unschedulable for rec in after if rec.state == State.POD_RESTART_REQUIRED.value)
    still = {
        p["metadata"]["uid"]
        for p in r.cluster.store.objects(r.cluster.type("pods"))
        if p["metadata"]["namespace"] in ("ml-training", "inference")
    }
    assert gpu_pods <= still, "a GPU pod was evicted for a restart-only change"
    assert len(r.cluster.daemonsets.driver.kept_loaded) == len(r.info.nodes)
    assert r.cluster.daemonsets.incidents == []
    for node in r.info.nodes:
        assert driver_pod(r, node)["metadata"]["labels"]["team"] == "gpu"


def test_max_unavailable_zero_upgrades_only_nodes_already_unavailable(rollout: Any) -> None:
    policy = {**FAST_POLICY, "maxUnavailable": 0, "failureDomains": {"canary": "us-east-1b"}}
    # passes a quarter of a virtual second apart, the pace of the real-time loop: gpu-b-01 is done in about 4.5 s
    r: Rollout = rollout("healthy", policy, virtual=True, step=0.25)
    r.kubectl("cordon", "gpu-b-01")
    status = r.run_until(("Running",), timeout=60, hold=8.0)
    assert r.node("gpu-b-01")["metadata"]["labels"][STATE_LABEL] == State.DONE.value
    assert r.node("gpu-b-01")["spec"].get("unschedulable") is True
    others = [n for n in r.info.nodes if n != "gpu-b-01"]
    assert {r.node(n)["metadata"]["labels"][STATE_LABEL] for n in others} == {State.UPGRADE_REQUIRED.value}
    assert status["message"] == (
        "maxUnavailable 0: only nodes already unavailable (cordoned or NotReady) start; gpu-b-02 is available and "
        "waits; raise maxUnavailable; see runbooks/rollout-halted.md"
    )
