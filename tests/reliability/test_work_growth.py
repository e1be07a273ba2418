"""Guards that catch a step growing faster than the fleet, without timing anything: the Python calls
made in upgrader's own code (the emulator's not counted) by `plan --from-file` and by a pass, at two
fleet sizes, must grow no faster than the fleet (twice the nodes: at most GROWTH times the calls).
The fleets are bench's: ReplicaSet-owned GPU pods behind PDBs, so every finding does its work
(bench/README.md measures the same paths in wall time and memory at 5,000 and 15,000 nodes).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tests.reliability.test_pass_cost import Fleet
from upgrader.commands.cli import main
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.largefleet import kubectl_list, paused_rollout

GROWTH = 2.3  # twice the fleet: linear is 2.0, n log n a little more; a square is 4
# With the watch-fed copy, a pass costs what changed: each node added to a fleet where nothing moves
# adds a few generator steps over the nodes (3 calls today). A pass that views every node again adds
# about 35 calls a node, one that views every pod (the room under `wait`, before issue 24) over 1,000.
PER_NODE = 8
SIZES = (100, 200)
OURS = str(Path(__file__).resolve().parents[2] / "upgrader")
EMULATOR = str(Path(OURS) / "sim")


def calls_in_upgrader(run: Callable[[], Any]) -> int:
    """How many Python functions of upgrader `run` calls, leaving out the emulator's and whatever the
    emulator calls (it matches selectors with core's functions when it serves an eviction)."""
    count = inside = 0

    def profile(frame: FrameType, event: str, _: Any) -> None:
        nonlocal count, inside
        path = frame.f_code.co_filename
        if path.startswith(EMULATOR):
            inside += {"call": 1, "return": -1}.get(event, 0)
        elif event == "call" and not inside and path.startswith(OURS):
            count += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


def plan_calls(tmp: Path, nodes: int) -> int:
    path = tmp / f"fleet-{nodes}.json"
    path.write_text(json.dumps(kubectl_list(nodes, 30)))
    out = tmp / "plan.json"

    def plan() -> None:
        stdout, sys.stdout = sys.stdout, out.open("w")
        try:
            assert main(["plan", "--dry-run", "--from-file", str(path), "-o", "json"]) in (0, 1)
        finally:
            sys.stdout.close()
            sys.stdout = stdout

    calls = calls_in_upgrader(plan)
    findings = {f["kind"] for n in json.loads(out.read_text())["nodes"] for f in n.get("findings", [])}
    assert findings, "every finding judged, some found"
    return calls


def test_plan_work_grows_with_the_fleet_not_its_square(tmp_path: Path) -> None:
    small, large = (plan_calls(tmp_path, n) for n in SIZES)
    assert large <= GROWTH * small, f"plan: {small} calls at {SIZES[0]} nodes, {large} at {SIZES[1]}"


def pass_calls(nodes: int, policy: dict[str, Any], paused: bool) -> int:
    cluster = EmulatedCluster.virtual()
    cluster.load(paused_rollout(nodes))
    if not paused:  # the fleet carries an older CLI's pause in its status: a rollout under way without it
        cluster.store.delete(cluster.type("configmaps"), "gpu-operator", "gpu-driver-upgrade-status")
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    controller = Controller(api, policy_from_mapping(policy), Settings(identity="work"), cluster.store.clock.now)
    controller.reconcile()  # the first pass writes the status; the next is the one counted
    return calls_in_upgrader(controller.reconcile)


@pytest.mark.parametrize(
    ("policy", "paused"),
    [({}, True), ({"maxParallelUpgrades": 0, "gpuCapacity": {"onInsufficient": "wait"}}, False)],
    ids=["idle", "capacity-wait"],
)
def test_a_pass_grows_with_the_fleet_not_its_square(policy: dict[str, Any], paused: bool) -> None:
    small, large = (pass_calls(n, policy, paused) for n in SIZES)
    assert large <= GROWTH * small, f"a pass: {small} calls at {SIZES[0]} nodes, {large} at {SIZES[1]}"


@pytest.mark.parametrize("policy", [{}, {"gpuCapacity": {"onInsufficient": "wait"}}], ids=["default", "capacity-wait"])
@pytest.mark.parametrize("in_progress", [0, 4], ids=["idle", "4-waiting-for-jobs"])
def test_a_pass_with_the_copy_costs_what_changed_not_the_fleet(policy: dict[str, Any], in_progress: int) -> None:
    """The watch-fed copy is caught up and nothing else moved since the last pass: the pass's work may
    grow with the nodes in progress, not with the nodes that sit still."""
    counted = []
    for nodes in SIZES:
        fleet = Fleet(nodes, cached=True, policy=policy_from_mapping(policy))
        fleet.run_pass()  # the first pass listed afresh; this one, the first from the copy, builds what is carried
        fleet.put_in_progress(in_progress, "wait-for-jobs-required")
        fleet.catch_up()
        counted.append(calls_in_upgrader(fleet.controller.reconcile))
    small, large = counted
    per_node = (large - small) / (SIZES[1] - SIZES[0])
    assert per_node <= PER_NODE, (
        f"a pass with the copy: {small} calls at {SIZES[0]} nodes, {large} at {SIZES[1]}: "
        f"{per_node:.1f} more for each node that did not change"
    )
