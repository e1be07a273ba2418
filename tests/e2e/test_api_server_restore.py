"""An API server that comes back older (issue 11): mid-rollout the emulator is restored from a
backup taken earlier, so its resourceVersions go back below those the controller's watch-fed copy
holds, and an admin cordons a node the copy says upgrader is about to uncordon.

Whole rollouts on a virtual clock, in process, the copy fed by the informers step by step (each
step does what `Informer.run` does once). The restore lands between the watches' step and a pass,
so that pass decides on the newer copy. Whatever the restored server answers a watch resumed from
a version it has not reached (kube-apiserver holds it silently; 410 Gone; 504 "Too large resource
version"; or an etcd restore with --bump-revision, after which every resumed watch is 410 Gone),
upgrader must not undo the admin's cordon, must drop its newer copy for what the server now serves,
and must finish the rollout from the restored state."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.shown import shown
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import STATE_LABEL, WAS_UNSCHEDULABLE, State
from upgrader.core.model.views import node_view
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.cache import ClusterCache, node_metadata
from upgrader.kube.informer import Informer
from upgrader.sim.apiserver.backup import Backup
from upgrader.sim.apiserver.faults import RequestRecord
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder

POLICY = {
    "maxParallelUpgrades": 2,
    "maxUnavailable": 2,
    "failureDomains": {"canary": "us-east-1a", "soakSeconds": 5},
    "drain": {"enable": True, "podSelector": "app=api-gateway", "deleteEmptyDir": True},
}
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
ADMIN = "kubectl/v1.31.0 (admin)"


def step(informer: Informer[Any]) -> None:
    """One round of `Informer.run`: a watch that ends in an error leaves the copy unsynced."""
    with contextlib.suppress(ApiError):
        informer.step()


def holds_what_is_served(cluster: EmulatedCluster, cache: ClusterCache, settings: Settings) -> bool:
    """The copy is synced and holds exactly the server's nodes and driver pods (by content: after a
    restore, one resourceVersion can name two different objects)."""
    nodes, pods = cache.nodes.entries(), cache.driver_pods.entries()
    if nodes is None or pods is None:
        return False
    ns, selector = settings.driver_namespace, settings.driver_pod_selector
    served_pods = cluster.store.list(cluster.type("pods"), ns, selector).items
    served = {n["metadata"]["name"]: n for n in cluster.store.objects(cluster.type("nodes"))}
    return {k: (e.raw, e.view) for k, e in nodes.items()} == {
        k: (node_metadata(n), node_view(n)) for k, n in served.items()
    } and {k: (e.version, e.view.uid) for k, e in pods.items()} == {
        f"{ns}/{p['metadata']['name']}": (int(p["metadata"]["resourceVersion"]), p["metadata"]["uid"])
        for p in served_pods
    }


def uncordons(requests: list[RequestRecord], node: str) -> list[RequestRecord]:
    """PATCHes of the node that clear spec.unschedulable (upgrader's merge patch sends null)."""
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


@pytest.mark.parametrize("answer", ["wait", "gone", "too-large", "bump"])
def test_a_restored_api_server_neither_undoes_an_admins_cordon_nor_stops_the_rollout(
    answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    policy = policy_from_mapping(POLICY)
    settings = Settings(identity="restore")
    controller = Controller(api, policy, settings, cluster.store.clock.now)
    cache = ClusterCache(KubeApi(cluster.client(), sleep=lambda _: None), settings, lambda: None)
    controller.cache = cache
    admin_client = cluster.client()
    admin_client.user_agent = ADMIN
    admin = k8s.CoreV1Api(admin_client)
    victim = info.domains["us-east-1b"][0]

    def state(name: str) -> str | None:
        return cluster.get("nodes", name)["metadata"]["labels"].get(STATE_LABEL)

    backup: Backup | None = None
    copy_before = restored_at = reset_at = seen_before = 0
    recorder: RolloutRecorder | None = None
    status: dict[str, object] = {}
    for second in range(600):
        step(cache.nodes)
        step(cache.driver_pods)
        if restored_at and not reset_at and holds_what_is_served(cluster, cache, settings):
            reset_at = second
            copy_now = int(cache.nodes.version)
            assert copy_now > copy_before if answer == "bump" else copy_now < copy_before
        if backup is None and all(state(n) == State.DONE.value for n in info.domains["us-east-1a"]):
            assert state(victim) == State.UPGRADE_REQUIRED.value
            backup = cluster.backup()
        if backup is not None and not restored_at and state(victim) == State.UNCORDON_REQUIRED.value:
            # The newer copy says upgrader uncordons the victim next; the restored server has it
            # not even started, and an admin cordons it for a reason of their own.
            copy_before = int(cache.nodes.version)
            assert copy_before > backup.resource_version
            if answer == "bump":
                cluster.restore_from(backup, bump_revision=1000)
            else:
                cluster.restore_from(backup, future_watches=answer)
            assert state(victim) == State.UPGRADE_REQUIRED.value
            admin.patch_node(victim, {"spec": {"unschedulable": True}})
            restored_at, seen_before = second, len(cluster.requests)
            recorder = RolloutRecorder(cluster)  # what happens from the restored state on
        status = shown(controller.reconcile().status)
        if status.get("phase") == "Done":
            break
        cluster.advance(1)

    assert restored_at and recorder is not None, "the rollout reached the restore"
    assert status.get("phase") == "Done", status.get("message")
    # The pass on the newer copy did try to uncordon the victim, guarded by the version it held:
    # the server refused it (409), and no uncordon of the victim went through afterwards.
    after = cluster.requests[seen_before:]
    tried = uncordons(after, victim)
    assert tried and tried[0].status == 409, [(r.status, r.body) for r in tried]
    held = int(tried[0].body["metadata"]["resourceVersion"])  # the victim's version in the newer copy
    assert backup is not None and backup.resource_version < held <= copy_before
    assert [r.status for r in tried] == [409] * len(tried), "an uncordon that undid the admin's cordon went through"
    # The copy was reset to what the restored server serves, within two passes of the restore.
    assert reset_at and reset_at - restored_at <= 2, (restored_at, reset_at)
    assert any(r.verb == "list" and r.path == "/api/v1/nodes" for r in after)
    went_back = [r.getMessage() for r in caplog.records if "resourceVersion went back" in r.getMessage()]
    assert bool(went_back) == (answer != "bump"), went_back  # said aloud when versions went back
    # The rollout finished from the restored state: the victim was started anew (the admin's cordon
    # recorded as someone else's) and left cordoned; every other node is done and schedulable.
    for name in info.nodes:
        node = cluster.get("nodes", name)
        assert state(name) == State.DONE.value, name
        assert bool(node["spec"].get("unschedulable")) == (name == victim), name
    assert [s.annotations.get(WAS_UNSCHEDULABLE) for s in recorder.starts() if s.node == victim] == ["true"]
    assert recorder.initially_cordoned == {victim}
    domain_of = {n: z for z, nodes in info.domains.items() for n in nodes}
    assert recorder.check(policy, domain_of, "us-east-1a", ZONES) == []
    assert [r.state for r in recorder.records if r.node == victim][-1] == State.DONE.value


# Resuming from a version the restored server hands out again (restore without --bump-revision),
# nothing tells the informers anything: a watch from a version not reached yet is held (kube-apiserver)
# or, once the server's writes have reached it, replays from there on the new history. A node being
# worked on reads its driver pods from the pass's own list of its pods, and that list's
# resourceVersion, below the copy's, makes the next pass list everything again.
@pytest.mark.parametrize(
    "answer",
    [
        "wait",
        "gone",
        "too-large",
        "bump",
    ],
)
def test_a_driver_pod_only_the_newer_history_had_does_not_hold_up_its_node(answer: str) -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy")
    policy = policy_from_mapping({**POLICY, "maxParallelUpgrades": 1, "maxUnavailable": 1})
    settings = Settings(identity="restore")
    controller = Controller(KubeApi(cluster.client(), sleep=lambda _: None), policy, settings, cluster.store.clock.now)
    cache = ClusterCache(KubeApi(cluster.client(), sleep=lambda _: None), settings, lambda: None)
    controller.cache = cache
    recorder = RolloutRecorder(cluster)
    node = info.domains["us-east-1b"][1]

    def state(name: str) -> str | None:
        return cluster.get("nodes", name)["metadata"]["labels"].get(STATE_LABEL)

    def drivers_in_copy() -> list[str]:
        return [e.view.name for e in (cache.driver_pods.entries() or {}).values() if e.view.node == node]

    backup: Backup | None = None
    restored_at = reset_at = 0
    status: dict[str, object] = {}
    for second in range(900):
        step(cache.nodes)
        step(cache.driver_pods)
        if restored_at and not reset_at and holds_what_is_served(cluster, cache, settings):
            reset_at = second
        if backup is None and state(node) == State.POD_RESTART_REQUIRED.value and not drivers_in_copy():
            backup = cluster.backup()  # its old driver pod deleted, the new one not created yet
        if backup is not None and not restored_at and drivers_in_copy():
            # The copy holds the new driver pod; the restored server never created that one.
            if answer == "bump":
                cluster.restore_from(backup, bump_revision=1000)
            else:
                cluster.restore_from(backup, future_watches=answer)
            restored_at = second
        status = shown(controller.reconcile().status)
        if status.get("phase") == "Done":
            break
        cluster.advance(1)

    assert restored_at, "the rollout reached the restore"
    assert reset_at and reset_at - restored_at <= 3, (restored_at, reset_at)
    assert status.get("phase") == "Done", status.get("message")
    assert {n: state(n) for n in info.nodes} == {n: State.DONE.value for n in info.nodes}
    assert [r.node for r in recorder.records if r.state == State.FAILED.value] == [], "no node timed out"
