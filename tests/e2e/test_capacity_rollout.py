"""A node held back because the GPU pods it evicts would not fit, end to end: `plan` predicts it, the
real controller (in-process, over the emulator's API, virtual clock) holds it under
`gpuCapacity.onInsufficient: wait` and starts it once room appears, and the emulator's own scheduler
(upgrader/sim/controllers/node_fit.py, written apart from core/node/capacity.py) agrees: no evicted pod is left Pending.

The fleet is the healthy scenario with 7 nodes (3, 2 and 2 in three zones). A StatefulSet pod
`pretrain-0` on X, the canary zone's first node, may run only on X and the zone's two other nodes, Y
and Z (required node affinity on `metadata.name`), and asks one GPU more than either has free. X's
other GPU pods (a Deployment's 2 GPUs, a StatefulSet's 4) move too, and kube-scheduler spreads them
onto the nodes with the most room, so X waits until both Y and Z have been upgraded and uncordoned
(their own GPU pods gone elsewhere); then X starts and the pod lands on Y or Z.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from upgrader.commands.cli import main
from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.settings import Settings
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.apiserver.podutil import gpu_requests, is_terminal
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import GPU, GPUS_PER_NODE, ZONES, pod_object
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder
from upgrader.sim.proving.makespan import run_until_done

NODES = 7
# Budgets wide enough for the whole canary zone at once, so that while Y and the zone's third node
# are in progress nothing but room holds X, and the status names that wait.
# The zone's third node runs the scenario's nightly eval Job: wait for it rather than unload under it.
POLICY: dict[str, Any] = {
    "maxParallelUpgrades": 3,
    "maxUnavailable": 3,
    "waitForCompletion": {"podSelector": "app=batch-eval"},
    "gpuCapacity": {"onInsufficient": "wait"},
}
STATUS_NS, STATUS_NAME = "gpu-operator", "gpu-driver-upgrade-status"
HELD_WHY = "evicted GPU pods would find no room"


def free_gpus(cluster: EmulatedCluster, node: str) -> int:
    obj = cluster.get("nodes", node) or {}
    used = sum(
        gpu_requests(p).get(GPU, 0)
        for p in cluster.store.objects(cluster.type("pods"))
        if (p.get("spec") or {}).get("nodeName") == node and not is_terminal(p)
    )
    return int(obj["status"]["allocatable"][GPU]) - used


def pinned_pretrain(gpus: int, x: str, *others: str) -> dict[str, Any]:
    pod = pod_object("pretrain-0", x, {"app": "pretrain"}, "nvcr.io/nvidia/nemo:24.05", gpus,
                     ("apps/v1", "StatefulSet", "pretrain"))
    # matchFields on metadata.name takes exactly one value (API validation): one term per node, ORed.
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]} for name in (x, *others)]
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    }
    return pod


def test_a_node_whose_pods_would_not_fit_is_held_until_room_appears_and_plan_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy", NODES)
    x, y, z = info.domains[ZONES[0]]
    need = max(free_gpus(cluster, y), free_gpus(cluster, z)) + 1
    assert 1 <= need <= GPUS_PER_NODE
    cluster.create("pods", pinned_pretrain(need, x, y, z), "ml-training")
    cluster.store.run_due()

    # (1) The preflight predicts it: a blocking finding on X naming the pod and Y's room.
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    cluster.serve()
    try:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        code = main(["plan", "--dry-run", "--kubeconfig", str(kubeconfig), "--policy", str(policy_file), "-o", "json"])
    finally:
        cluster.stop()
    plan = json.loads(capsys.readouterr().out)
    found = [
        (f["node"], f["severity"], f["message"]) for f in plan["findings"] if f["kind"] == "insufficient-gpu-capacity"
    ]
    assert code == 1 and (x, "blocking") in [(n, s) for n, s, _ in found], found
    message = next(m for n, _, m in found if n == x)
    assert f"ml-training/pretrain-0 (nvidia.com/gpu {need})" in message
    assert f"{y} (upgraded with it in wave 1), {z} (upgraded with it in wave 1)" in message  # its other nodes
    assert message.endswith("`run` holds the node at upgrade-required until room appears "
                            "(gpuCapacity.onInsufficient: wait)")

    # (2) The rollout: X waits, named, until Y is upgraded; then X starts and everything is Done.
    recorder = RolloutRecorder(cluster, status=(STATUS_NS, STATUS_NAME))
    policy = policy_from_mapping(POLICY)
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy, Settings(identity="capacity-e2e"), cluster.store.clock.now)
    statuses: list[tuple[float, dict[str, Any]]] = []

    def on_pass(_: int, __: PassReport) -> None:
        cm = cluster.get("configmaps", STATUS_NAME, STATUS_NS) or {}
        statuses.append((cluster.store.clock.now(), json.loads((cm.get("data") or {}).get("status.json") or "{}")))

    run_until_done(cluster, controller, NODES, 1.0, 4 * 3600, on_pass=on_pass, skip_idle=True)
    starts = recorder.starts()
    order = [s.node for s in starts]
    assert sorted(order) == sorted(info.nodes) and len(order) == NODES
    start_of = {s.node: s.time for s in starts}
    records = recorder.records
    done = {n: next(i for i, r in enumerate(records) if r.node == n and r.state == State.DONE.value) for n in (y, z)}
    x_start = next(i for i, r in enumerate(records) if r.node == x and r.state == State.CORDON_REQUIRED.value)
    assert x_start > max(done.values()), order  # held until Y and Z were back (in the same pass at the earliest)
    assert start_of[x] > min(start_of[y], start_of[z])
    held = [
        (t, s) for t, s in statuses
        if (s.get("waiting_on") or {}).get("reason") == "insufficient-gpu-capacity"
    ]
    assert held, [((s.get("waiting_on") or {}).get("reason"), t) for t, s in statuses]
    for t, s in held:
        assert t <= start_of[x]
        assert s["waiting_on"]["nodes"][0] == {"node": x, "why": HELD_WHY}
        assert s["message"].startswith(f"{x} is held at upgrade-required: ")
        assert "ml-training/pretrain-0" in s["message"]
        assert s["waiting_since"] == held[0][1]["waiting_since"]
    events = [e for e in cluster.store.objects(cluster.type("events"))
              if str(e.get("message", "")).startswith(f"rollout waiting: {x} is held at upgrade-required")]
    assert [(e["involvedObject"]["name"], e["type"]) for e in events] == [(x, "Warning")]

    # (3) The emulator's scheduler placed every evicted pod: nothing Pending, pretrain-0 on Y or Z.
    pods = cluster.store.objects(cluster.type("pods"))
    assert [p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") == "Pending"] == []
    (pretrain,) = [p for p in pods if p["metadata"]["name"] == "pretrain-0"]
    assert pretrain["spec"]["nodeName"] in (y, z)
    final = statuses[-1][1]
    assert final["phase"] == "Done" and final["waiting_on"] is None
    for node in info.nodes:
        obj = cluster.get("nodes", node) or {}
        assert obj["metadata"]["labels"][STATE_LABEL] == State.DONE.value
        assert not obj["spec"].get("unschedulable"), f"{node} left cordoned"

    # (4) The campaign invariants: budgets, domain order (canary first), no cordon left, no PDB bypassed.
    domain_of = {n: z for z, members in info.domains.items() for n in members}
    assert recorder.check(policy, domain_of, ZONES[0], list(ZONES)) == []
    audit = recorder.check_disturbed(policy, set(info.nodes))
    assert (audit.violations, audit.excused) == ([], [])
