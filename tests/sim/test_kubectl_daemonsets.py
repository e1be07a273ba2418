"""End to end, the real kubectl against `upgrader sim serve`: the driver DaemonSets and their
ControllerRevisions, a deleted driver pod recreated at the newest revision (OnDelete),
`kubectl rollout undo`, and `kubectl get -w` printing a label change."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.sim.kubectl_harness import (
    DRIVER_DS,
    DRIVER_DS_OF_NODE,
    HASH_LABEL,
    OPERATOR_NS,
    Sim,
    StartSim,
    _env,
    by,
    headers,
    parse_tables,
)
from tests.sim.kubectl_harness import blocked as blocked
from tests.sim.kubectl_harness import healthy as healthy
from tests.sim.kubectl_harness import kubectl_bin as kubectl_bin
from tests.sim.kubectl_harness import sim_factory as sim_factory

pytestmark = pytest.mark.kubectl


# ----- 6. DaemonSets, ControllerRevisions, OnDelete recreation, watch -----------------------


def test_driver_daemonsets_have_revision_2_newest(blocked: Sim) -> None:
    text = blocked.ok("get", "ds,controllerrevisions", "-n", OPERATOR_NS)
    daemonsets, revisions = parse_tables(text)
    assert headers(text) == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "NODE SELECTOR",
        "AGE",
    ]
    ds_rows = by(daemonsets, "NAME")
    for ds in DRIVER_DS.values():
        row = ds_rows[f"daemonset.apps/{ds}"]
        # Three nodes per kernel, all Ready, none on the newest template yet (OnDelete).
        assert [row[c] for c in ("DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE")] == [
            "3",
            "3",
            "3",
            "0",
            "3",
        ], row
    assert list(revisions[0]) == ["NAME", "CONTROLLER", "REVISION", "AGE"]
    for ds in DRIVER_DS.values():
        owned = [r for r in revisions if r["CONTROLLER"] == f"daemonset.apps/{ds}"]
        assert sorted(int(r["REVISION"]) for r in owned) == [1, 2], owned
        assert all(r["NAME"].startswith(f"controllerrevision.apps/{ds}-") for r in owned), owned
    validator = [r for r in revisions if r["CONTROLLER"] == "daemonset.apps/nvidia-operator-validator"]
    assert [r["REVISION"] for r in validator] == ["1"]


def _revision_hashes(sim: Sim, ds: str) -> dict[int, str]:
    rows = sim.get("controllerrevisions", "-n", OPERATOR_NS)
    return {
        int(r["REVISION"]): r["NAME"].removeprefix(f"{ds}-")
        for r in rows
        if r["CONTROLLER"] == f"daemonset.apps/{ds}"
    }


def _driver_pods_on(sim: Sim, node: str) -> list[dict[str, str]]:
    result = sim.kubectl(
        "get",
        "pods",
        "-n",
        OPERATOR_NS,
        "-l",
        "app=nvidia-driver-daemonset",
        "--field-selector",
        f"spec.nodeName={node}",
        "-L",
        HASH_LABEL,
    )
    assert result.returncode == 0, result.stderr
    return parse_tables(result.stdout)[0] if result.stdout.strip() else []


def test_deleted_driver_pod_comes_back_at_newest_revision(healthy: Sim) -> None:
    node = "gpu-c-02"
    ds = DRIVER_DS_OF_NODE[node]
    hashes = _revision_hashes(healthy, ds)
    assert sorted(hashes) == [1, 2]
    (old,) = _driver_pods_on(healthy, node)
    assert old["CONTROLLER-REVISION-HASH"] == hashes[1], old
    up_to_date = by(healthy.get("ds", "-n", OPERATOR_NS), "NAME")[ds]["UP-TO-DATE"]
    assert up_to_date == "0"

    assert healthy.ok("delete", "pod", "-n", OPERATOR_NS, old["NAME"]) == f'pod "{old["NAME"]}" deleted\n'

    deadline = time.monotonic() + 10
    seen: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        seen = _driver_pods_on(healthy, node)
        replaced = [p for p in seen if p["NAME"] != old["NAME"]]
        if len(seen) == 1 and [(p["READY"], p["STATUS"]) for p in replaced] == [("1/1", "Running")]:
            break
        time.sleep(0.25)
    else:
        pytest.fail(f"no new Ready driver pod on {node} within 10 s; last seen: {seen}")
    (new,) = seen
    assert new["NAME"].startswith(f"{ds}-"), new
    assert new["CONTROLLER-REVISION-HASH"] == hashes[2], new
    assert by(healthy.get("ds", "-n", OPERATOR_NS), "NAME")[ds]["UP-TO-DATE"] == "1"


def test_rollout_undo_makes_the_old_revision_newest_again(sim_factory: StartSim) -> None:
    """`kubectl rollout undo` re-applies revision 1's template: the DaemonSet controller reuses that
    ControllerRevision (same hash, renumbered 3), so the driver pods still on it are up to date."""
    sim = sim_factory("healthy")
    ds = DRIVER_DS["105"]
    hashes = _revision_hashes(sim, ds)
    assert sorted(hashes) == [1, 2]
    assert sim.ok("rollout", "undo", f"ds/{ds}", "-n", OPERATOR_NS) == f"daemonset.apps/{ds} rolled back\n"
    assert _revision_hashes(sim, ds) == {2: hashes[2], 3: hashes[1]}
    assert by(sim.get("ds", "-n", OPERATOR_NS), "NAME")[ds]["UP-TO-DATE"] == "3"
    history = sim.ok("rollout", "history", f"ds/{ds}", "-n", OPERATOR_NS, "--revision=3")
    assert "Image:\tnvcr.io/nvidia/driver:535-5.15.0-105-generic-ubuntu22.04" in history, history


def test_watch_prints_a_label_change(healthy: Sim) -> None:
    node, label = "gpu-a-02", "example.com/poked"
    watch = subprocess.Popen(
        healthy.argv("get", "node", node, "-w", "-L", label, "--request-timeout=4s"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert watch.stdout is not None
        first = [watch.stdout.readline(), watch.stdout.readline()]  # header, then the node as it is
        assert first[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "POKED"], first
        assert first[1].split()[:2] == [node, "Ready"] and len(first[1].split()) == 5, first
        assert healthy.ok("label", "node", node, f"{label}=yes") == f"node/{node} labeled\n"
        rest, err = watch.communicate(timeout=15)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, err
    assert [line.split() for line in rest.splitlines()][-1][:2] == [node, "Ready"], rest
    assert rest.splitlines()[-1].split()[-1] == "yes", rest


def test_rolling_update_replaces_every_old_driver_pod_itself(sim_factory: StartSim) -> None:
    """Switched to RollingUpdate (what upgrader refuses to run beside), the DaemonSet controller
    deletes the old driver pods itself, one unavailable at a time, and `kubectl rollout status`
    follows it to the end."""
    sim = sim_factory("healthy")
    ds = DRIVER_DS["105"]
    assert by(sim.get("ds", "-n", OPERATOR_NS), "NAME")[ds]["UP-TO-DATE"] == "0"
    patch = '{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}}}'
    patched = sim.ok("patch", "ds", ds, "-n", OPERATOR_NS, "--type", "merge", "-p", patch)
    assert patched == f"daemonset.apps/{ds} patched\n"
    text = sim.ok("rollout", "status", f"ds/{ds}", "-n", OPERATOR_NS, "--timeout=60s", timeout=70)
    assert text.splitlines()[-1] == f'daemon set "{ds}" successfully rolled out', text
    row = by(sim.get("ds", "-n", OPERATOR_NS), "NAME")[ds]
    assert [row[c] for c in ("DESIRED", "READY", "UP-TO-DATE", "AVAILABLE")] == ["3", "3", "3", "3"], row
    hashes = _revision_hashes(sim, ds)
    for node in [n for n, d in DRIVER_DS_OF_NODE.items() if d == ds]:
        (pod,) = _driver_pods_on(sim, node)
        assert pod["CONTROLLER-REVISION-HASH"] == hashes[2], pod
