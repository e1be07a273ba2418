"""batch/v1 Jobs whose pods run for `sim.upgrader.io/run-seconds` (or forever), on a virtual clock."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from tests.sim.builders import is_ready, node_body
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import JOB_RUN_SECONDS

NS = "default"


def job_body(name: str, run_seconds: str, node_selector: dict[str, str] | None = None) -> dict[str, object]:
    spec: dict[str, object] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "eval",
                "image": "registry.example/eval:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "metadata": {"name": name, "annotations": {JOB_RUN_SECONDS: run_seconds}},
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def job_pods(core: k8s.CoreV1Api, name: str) -> list[k8s.V1Pod]:
    return core.list_namespaced_pod(NS, label_selector=f"job-name={name}").items


@pytest.fixture(autouse=True)
def nodes(core: k8s.CoreV1Api) -> None:
    core.create_node(node_body("node-a", {"pool": "a"}))
    core.create_node(node_body("node-b", {"pool": "b"}))


def test_a_job_pod_finishes_after_its_run_seconds(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, job_body("eval", "10"))
    (pod,) = job_pods(core, "eval")
    assert pod.status.phase == "Running" and is_ready(pod) and pod.spec.node_name in ("node-a", "node-b")
    assert batch.read_namespaced_job("eval", NS).status.active == 1

    cluster.advance(10 - 0.01)
    assert job_pods(core, "eval")[0].status.phase == "Running"
    assert not batch.read_namespaced_job("eval", NS).status.conditions

    cluster.advance(0.01)
    (pod,) = job_pods(core, "eval")
    assert pod.status.phase == "Succeeded" and not is_ready(pod)
    assert pod.status.container_statuses[0].state.terminated.reason == "Completed"
    status = batch.read_namespaced_job("eval", NS).status
    assert status.succeeded == 1 and not status.active
    assert {(c.type, c.status) for c in status.conditions} >= {("Complete", "True")}
    assert status.completion_time is not None


def test_a_never_ending_job_keeps_running(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, job_body("stuck", "never"))
    cluster.advance(24 * 3600)
    (pod,) = job_pods(core, "stuck")
    assert pod.status.phase == "Running" and is_ready(pod)
    status = batch.read_namespaced_job("stuck", NS).status
    assert status.active == 1 and not status.succeeded and not status.conditions


def test_a_job_replaces_a_pod_it_lost(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, job_body("eval", "never"))
    (first,) = job_pods(core, "eval")
    core.delete_namespaced_pod(first.metadata.name, NS, grace_period_seconds=0)
    assert job_pods(core, "eval") == []
    cluster.advance(cluster.settings.job_replace_delay)
    (second,) = job_pods(core, "eval")
    assert second.metadata.name != first.metadata.name and second.status.phase == "Running"


def test_job_pods_go_to_a_schedulable_node_their_selector_admits(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, job_body("on-b", "never", {"pool": "b"}))
    assert [p.spec.node_name for p in job_pods(core, "on-b")] == ["node-b"]

    core.patch_node("node-a", {"spec": {"unschedulable": True}})
    batch.create_namespaced_job(NS, job_body("anywhere", "never"))
    assert [p.spec.node_name for p in job_pods(core, "anywhere")] == ["node-b"]
