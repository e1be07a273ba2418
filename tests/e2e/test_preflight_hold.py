"""`run` enforces `plan`'s preflight per node (docs/policy.md#preflight): a node whose image, profile
or CUDA check is blocking is held at upgrade-required, never cordoned or evicted, while the others go
on; an input that cannot be read holds the nodes it would judge. On a virtual clock, through the
official client, against the emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.shown import shown
from upgrader.controller.loop import Controller
from upgrader.controller.preflight_source import PreflightFlags, PreflightSource, read_files
from upgrader.controller.rollout_metrics import families
from upgrader.controller.settings import Settings
from upgrader.core.model.states import HELD_KIND, HELD_REASON, STATE_LABEL, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.core.report.document import read_status
from upgrader.inputs import ConfigError
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import OPERATOR_NS
from upgrader.sim.fleets.scenarios import (
    DRIVER_REPO,
    LEDGER_CONFIGMAP,
    NEW_DRIVER,
    UNBUILT_KERNEL,
    ScenarioInfo,
    build,
    driver_tag,
)

LEDGER = {"configMap": f"{OPERATOR_NS}/{LEDGER_CONFIGMAP}"}
POLICY: dict[str, Any] = {
    "maxParallelUpgrades": 2,
    "maxUnavailable": "50%",
    "failureDomains": {"canary": "us-east-1a"},
    "preflight": {"imageLedger": LEDGER},
}
MISSING_TAG = driver_tag(NEW_DRIVER, UNBUILT_KERNEL)


def world(
    scenario: str, policy: dict[str, Any], flags: PreflightFlags | None = None
) -> tuple[EmulatedCluster, Controller, ScenarioInfo]:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, scenario)
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    pol = policy_from_mapping(policy)
    clock = cluster.store.clock.now
    judge = PreflightSource(api, pol, clock, read_files(pol, flags))
    return cluster, Controller(api, pol, Settings(identity="virtual"), clock, None, judge), info


def run(cluster: EmulatedCluster, controller: Controller, seconds: float) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for _ in range(int(seconds)):
        status = shown(controller.reconcile().status)
        cluster.advance(1.0)
    return status


def state(cluster: EmulatedCluster, node: str) -> str:
    return str(cluster.get("nodes", node)["metadata"]["labels"].get(STATE_LABEL))


def touched(cluster: EmulatedCluster, node: str) -> list[str]:
    """Requests that took a workload off `node`: evictions and deletions of its pods that landed."""
    pods = set(pods_on(cluster, node))
    return [
        f"{r.method} {r.path}"
        for r in cluster.requests
        if r.resource == "pods" and r.name in pods and r.method in ("DELETE", "POST") and r.status < 300
    ]


def pods_on(cluster: EmulatedCluster, node: str) -> list[str]:
    return sorted(
        p["metadata"]["name"] for p in cluster.store.objects(cluster.type("pods")) if p["spec"].get("nodeName") == node
    )


def warnings_on(cluster: EmulatedCluster, node: str) -> list[str]:
    return [
        e["message"]
        for e in cluster.store.objects(cluster.type("events"))
        if e["involvedObject"]["name"] == node and e["type"] == "Warning"
    ]


def test_a_node_whose_image_is_missing_is_held_with_its_workloads_while_the_others_upgrade() -> None:
    cluster, ctl, info = world("missing-image", POLICY)
    node = info.missing_image_node
    assert node == "gpu-a-02"
    pods_before = pods_on(cluster, node)
    status = run(cluster, ctl, 150)
    assert state(cluster, "gpu-a-01") == State.DONE.value, "the canary's other node goes on"
    assert state(cluster, node) == State.UPGRADE_REQUIRED.value
    assert not cluster.get("nodes", node)["spec"].get("unschedulable"), "never cordoned"
    assert touched(cluster, node) == []
    assert pods_on(cluster, node) == pods_before, "its workloads are intact"
    reason = (
        f"no precompiled driver image {MISSING_TAG} in configmap {OPERATOR_NS}/{LEDGER_CONFIGMAP} key images.txt: "
        "its driver pod would fail to pull and its GPUs drop out; build and push that image first"
    )
    assert status["held"] == [
        {
            "node": node,
            "kind": "missing-driver-image",
            "reason": reason,
            "since": status["held"][0]["since"],
            "runbook": "runbooks/missing-driver-image.md",
        }
    ]
    annotations = cluster.get("nodes", node)["metadata"]["annotations"]
    assert annotations[HELD_KIND] == "missing-driver-image" and annotations[HELD_REASON] == reason
    held_events = [m for m in warnings_on(cluster, node) if m.startswith("held at upgrade-required")]
    assert len(held_events) == 1, "one Event for the hold, not one per pass"
    # The canary domain cannot finish: the next one waits, naming the held node and what ends the wait.
    assert status["phase"] == "Running"
    assert status["waiting_on"]["reason"] in ("previous-domain", "preflight-hold")
    assert "gpu-a-02" in status["message"] and "runbooks/missing-driver-image.md" in status["message"]
    assert state(cluster, "gpu-b-01") == State.UPGRADE_REQUIRED.value, "the domain order holds"
    read = read_status(status)  # the gauges of the status as stored, read back
    assert read is not None
    gauges = {(m.name, tuple(s.labels.values())): s.value for m in families(read, 0.0) for s in m.samples}
    assert gauges[("upgrader_held_nodes", ("missing_driver_image",))] == 1
    assert gauges[("upgrader_node_blocked_info", (node, "upgrade-required", "missing_driver_image"))] == 1


def test_publishing_the_image_releases_the_node_and_the_rollout_finishes() -> None:
    cluster, ctl, _ = world("missing-image", POLICY)
    run(cluster, ctl, 60)
    assert state(cluster, "gpu-a-02") == State.UPGRADE_REQUIRED.value
    cluster.settings.registry[DRIVER_REPO].add(MISSING_TAG)  # built and pushed
    cm = cluster.get("configmaps", LEDGER_CONFIGMAP, OPERATOR_NS)
    ledger = cm["data"]["images.txt"] + f"{DRIVER_REPO}:{MISSING_TAG}\n"
    cluster.store.patch(
        cluster.type("configmaps"), OPERATOR_NS, LEDGER_CONFIGMAP, "application/merge-patch+json",
        {"data": {"images.txt": ledger}},
    )
    status = run(cluster, ctl, 900)
    assert status["phase"] == "Done", status["message"]
    assert status["held"] == []
    assert HELD_KIND not in cluster.get("nodes", "gpu-a-02")["metadata"]["annotations"]


def test_a_ledger_that_cannot_be_read_holds_every_node_and_says_why() -> None:
    cluster, ctl, info = world("healthy", POLICY)
    cluster.store.delete(cluster.type("configmaps"), OPERATOR_NS, LEDGER_CONFIGMAP)
    status = run(cluster, ctl, 30)
    assert all(state(cluster, n) == State.UPGRADE_REQUIRED.value for n in info.nodes), "fail closed: nothing starts"
    assert not touched(cluster, "gpu-a-01")
    first = status["held"][0]
    assert first["kind"] == "preflight-input"
    image = "550-5.15.0-105-generic-ubuntu22.04"
    assert first["reason"] == f"cannot check image {image}: configmap {OPERATOR_NS}/{LEDGER_CONFIGMAP} not found"
    assert status["waiting_on"]["reason"] == "preflight-hold"
    assert status["waiting_on"]["runbook"] == "runbooks/preflight-hold.md"


def test_a_workload_the_new_driver_cannot_run_holds_its_node(tmp_path: Path) -> None:
    cluster, ctl, _ = world("healthy", {**POLICY, "preflight": {}})
    node = "gpu-a-01"
    pod = next(
        p for p in cluster.store.objects(cluster.type("pods"))
        if p["spec"].get("nodeName") == node and p["metadata"]["namespace"] == "ml-training"
    )
    # CUDA 13 needs driver 580 or newer; the rollout brings 550.90.07.
    cluster.store.patch(
        cluster.type("pods"), "ml-training", pod["metadata"]["name"], "application/merge-patch+json",
        {"metadata": {"annotations": {"gpu-upgrader.io/cuda-runtime": "13.0"}}},
    )
    status = run(cluster, ctl, 60)
    assert state(cluster, node) == State.UPGRADE_REQUIRED.value
    assert state(cluster, "gpu-a-02") != State.UPGRADE_REQUIRED.value, "the other canary node goes on"
    held = {h["node"]: h for h in status["held"]}
    assert held[node]["kind"] == "cuda-incompatible"
    assert f"ml-training/{pod['metadata']['name']} would not run on driver {NEW_DRIVER}" in held[node]["reason"]


def test_an_unqualified_profile_holds_the_node(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("profiles: []\n")
    cluster, ctl, info = world("healthy", {**POLICY, "preflight": {}}, PreflightFlags(profiles=str(profiles)))
    status = run(cluster, ctl, 20)
    assert {h["kind"] for h in status["held"]} == {"unqualified-profile"}
    assert all(state(cluster, n) == State.UPGRADE_REQUIRED.value for n in info.nodes)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (
            PreflightFlags(ledger="/nonexistent/images.txt"),
            "--ledger /nonexistent/images.txt: cannot read: No such file or directory",
        ),
        (PreflightFlags(floors=("12=400",)), "preflight.cudaFloors / --floor: floor '12=400'"),
    ],
)
def test_bad_preflight_files_are_refused_before_anything_is_written(flags: PreflightFlags, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        read_files(policy_from_mapping({}), flags)
    assert str(caught.value).startswith(words)
    assert "\n" not in str(caught.value)
