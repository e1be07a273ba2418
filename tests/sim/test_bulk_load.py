"""`EmulatedCluster.load`: a bulk load settles to what loading the same objects one by one gives."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import JOB_RUN_SECONDS
from upgrader.sim.fleets.largefleet import fleet_objects, paused_rollout

Obj = dict[str, Any]


def small_fleet() -> list[Obj]:
    """A generated fleet with a node that lost its driver pod, a Job, and a CRD with an object."""
    lost = "nvidia-driver-daemonset-5.15.0-113-generic-ubuntu22.04-00003"
    objects = [o for o in fleet_objects(12, 10) if o["metadata"]["name"] != lost]
    objects.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "eval", "namespace": "team-0", "annotations": {JOB_RUN_SECONDS: "30"}},
            "spec": {
                "completions": 1,
                "parallelism": 1,
                "template": {
                    "metadata": {"labels": {"app": "app-1"}},
                    "spec": {"nodeName": "gpu-00002", "containers": [{"name": "eval", "image": "eval:1"}]},
                },
            },
        }
    )
    objects.append(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"plural": "widgets", "kind": "Widget", "singular": "widget"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": True, "storage": True}],
            },
        }
    )
    objects.append(
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "team-0"}}
    )
    return objects


def observed(cluster: EmulatedCluster) -> Obj:
    """Everything the behaviours computed, without resourceVersions and generated names."""
    store = cluster.store

    def statuses(plural: str, group: str) -> dict[tuple[str, str], Obj]:
        return {
            (o["metadata"].get("namespace", ""), o["metadata"]["name"]): o.get("status")
            for o in store.objects(cluster.type(plural, group))
        }

    pods = sorted(
        (
            p["metadata"]["namespace"],
            p["spec"].get("nodeName"),
            [r["name"] for r in p["metadata"].get("ownerReferences") or []],
            (p.get("status") or {}).get("phase"),
            p["metadata"]["name"] if p["metadata"]["name"].startswith(("app-", "nvidia-operator")) else "",
        )
        for p in store.objects(cluster.type("pods"))
    )
    return {
        "pdbs": statuses("poddisruptionbudgets", "policy"),
        "daemonsets": statuses("daemonsets", "apps"),
        "jobs": statuses("jobs", "batch"),
        "revisions": sorted(
            (r["metadata"]["name"], r["revision"]) for r in store.objects(cluster.type("controllerrevisions", "apps"))
        ),
        "pods": pods,
        "namespaces": sorted(n["metadata"]["name"] for n in store.objects(cluster.type("namespaces"))),
        "widgets": [w["metadata"]["name"] for w in store.objects(cluster.type("widgets", "example.com"))],
    }


@pytest.mark.parametrize("seconds", [0, 5, 60])
def test_bulk_load_settles_like_loading_one_by_one(seconds: float) -> None:
    objects = small_fleet()
    one_by_one, bulk = EmulatedCluster.virtual(), EmulatedCluster.virtual()
    assert one_by_one.load(copy.deepcopy(objects), bulk=False) == len(objects)
    assert bulk.load(copy.deepcopy(objects)) == len(objects)
    one_by_one.advance(seconds)
    bulk.advance(seconds)
    expected, got = observed(one_by_one), observed(bulk)
    assert got == expected
    # the budgets and DaemonSets really were computed, not left as loaded
    assert all(s["conditions"] for s in got["pdbs"].values())
    assert {s["currentNumberScheduled"] for s in got["daemonsets"].values()} == ({5, 6} if seconds < 3 else {6})


def test_loaded_objects_keep_their_uids_and_reach_watchers() -> None:
    cluster = EmulatedCluster.virtual()
    pods = cluster.type("pods")
    watcher = cluster.store.watch(pods, resource_version=str(cluster.store.resource_version))
    cluster.load(fleet_objects(3, 4))
    pod = cluster.get("pods", "nvidia-operator-validator-00001", "gpu-operator")
    assert pod is not None and pod["metadata"]["uid"] == "uid-pod-v-1"
    assert pod["metadata"]["resourceVersion"] != "1"
    added = [event for event, _ in watcher.drain()]
    assert added == ["ADDED"] * 12


def test_a_paused_rollout_fleet_is_labelled_and_paused() -> None:
    cluster = EmulatedCluster.virtual()
    cluster.load(paused_rollout(4, 3))
    nodes = cluster.store.objects(cluster.type("nodes"))
    assert {n["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] for n in nodes} == {"upgrade-required"}
    status = cluster.get("configmaps", "gpu-driver-upgrade-status", "gpu-operator")
    assert status is not None and status["data"]["paused"] == "true"


def test_large_lists_page_and_select_by_node() -> None:
    cluster = EmulatedCluster.virtual()
    cluster.load(fleet_objects(40, 10))
    pods = cluster.type("pods")
    on_node = cluster.store.list(pods, field_selector="spec.nodeName=gpu-00007")
    assert len(on_node.items) == 10 and {p["spec"]["nodeName"] for p in on_node.items} == {"gpu-00007"}
    first = cluster.store.list(pods, "gpu-operator", limit=30)
    assert len(first.items) == 30 and first.continue_token and first.remaining == 50
    rest = cluster.store.list(pods, "gpu-operator", continue_token=first.continue_token)
    assert len(rest.items) == 50
    assert {p["metadata"]["namespace"] for p in first.items + rest.items} == {"gpu-operator"}
