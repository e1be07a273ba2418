"""Shared by the restore tests: relabelling a node by a merge patch, and the nodes scenario
(back up, change, restore) that leaves clients having seen a version the server has not reached."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.sim.builders import node_body
from upgrader.sim.cluster import EmulatedCluster

MERGE = "application/merge-patch+json"


def label(cluster: EmulatedCluster, node: str, value: str) -> None:
    cluster.store.patch(cluster.type("nodes"), None, node, MERGE, {"metadata": {"labels": {"x": value}}})


def nodes_after_restore(cluster: EmulatedCluster, core: k8s.CoreV1Api, **restore: object) -> int:
    """n1, n2 backed up; then n1 relabelled, n2 deleted, n3 created; then the restore. Returns the
    resourceVersion clients had seen last before it."""
    core.create_node(node_body("n1", {"x": "before"}))
    core.create_node(node_body("n2"))
    backup = cluster.backup()
    label(cluster, "n1", "after")
    core.delete_node("n2")
    core.create_node(node_body("n3"))
    seen = int(core.list_node().metadata.resource_version)
    cluster.restore_from(backup, **restore)  # type: ignore[arg-type]
    return seen
