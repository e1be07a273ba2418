"""The "rollout halted" Warning is said once per halt: `pause` then `resume` over the same halt does not
say it again (issue 13, item 5); a new halt after a resume still is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from upgrader.commands.cli import main
from upgrader.controller.loop import Controller
from upgrader.controller.runner import build_controller
from upgrader.controller.settings import Settings
from upgrader.core.model.actions import Event
from upgrader.core.policy.policy import Policy
from upgrader.core.report.document import RolloutStatus
from upgrader.core.report.entries import NodeBlocked
from upgrader.core.report.kinds import Phase
from upgrader.core.rollout.status import phase_events
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build


@pytest.fixture
def halted(tmp_path: Path) -> Iterator[tuple[EmulatedCluster, Controller, str]]:
    cluster = EmulatedCluster()
    build(cluster, "pdb-blocked")
    url = cluster.serve()
    kubeconfig = str(cluster.write_kubeconfig(tmp_path / "kubeconfig"))
    settings = Settings(identity="events", lease_duration_seconds=3600)
    controller = build_controller(k8s.ApiClient(k8s.Configuration(host=url)), Policy(), settings)
    passes(controller, 20, until="Halted")
    yield cluster, controller, kubeconfig
    cluster.stop()


def passes(controller: Controller, n: int, until: str | None = None) -> str:
    phase = ""
    for _ in range(n):
        status = controller.reconcile().status
        phase = status.phase.value if status is not None else phase
        if phase == until:
            break
    return phase


def halted_events(cluster: EmulatedCluster) -> list[tuple[str, int]]:
    """(node, count) of every "rollout halted" Warning in the cluster: count is how often it was said."""
    return [
        (e["involvedObject"]["name"], int(e.get("count") or 1))
        for e in cluster.store.objects(cluster.type("events"))
        if e.get("type") == "Warning" and str(e.get("message", "")).startswith("rollout halted: ")
    ]


def test_pause_then_resume_over_a_halt_does_not_say_it_again(halted: Any) -> None:
    cluster, controller, kubeconfig = halted
    assert halted_events(cluster) == [("gpu-a-01", 1)]
    assert main(["pause", "--kubeconfig", kubeconfig, "-n", "gpu-operator"]) == 0
    assert passes(controller, 3) == "Paused"
    assert main(["resume", "--kubeconfig", kubeconfig, "-n", "gpu-operator"]) == 0
    assert passes(controller, 3) == "Halted"
    assert halted_events(cluster) == [("gpu-a-01", 1)]


def test_resume_alone_over_a_halt_does_not_say_it_again(halted: Any) -> None:
    cluster, controller, kubeconfig = halted
    assert main(["resume", "--kubeconfig", kubeconfig, "-n", "gpu-operator"]) == 0
    assert passes(controller, 3) == "Halted"
    assert halted_events(cluster) == [("gpu-a-01", 1)]


def _status(phase: str, halt: str | None, culprit: str = "gpu-a-01") -> RolloutStatus:
    blocked = (NodeBlocked(culprit, "pod-deletion-required", "pdb", str(halt), "", ""),) if halt else ()
    message = {"Halted": f"halted: {halt}", "Paused": "paused by an operator"}.get(phase, "rolling")
    return RolloutStatus(Phase(phase), message, halt, blocked=blocked)


@pytest.mark.parametrize(
    ("previous", "now", "said"),
    [
        (_status("Running", None), _status("Halted", "a blocked"), True),  # becomes halted
        (_status("Halted", "a blocked"), _status("Halted", "a blocked"), False),  # stays halted
        (_status("Paused", "a blocked"), _status("Halted", "a blocked"), False),  # resumed over the same halt
        (_status("Paused", "a blocked"), _status("Halted", "b failed", "gpu-b-01"), True),  # another halt
        (_status("Paused", None), _status("Halted", "a blocked"), True),  # halted as the pause ended
        (None, _status("Halted", "a blocked"), True),  # the first status written
    ],
)
def test_phase_events_say_each_halt_once(previous: RolloutStatus | None, now: RolloutStatus, said: bool) -> None:
    events = phase_events(previous, now)
    assert bool(events) is said
    if said:
        (event,) = events
        assert isinstance(event, Event)
        expected = (now.blocked[0].node, "Warning", f"rollout {now.message}")
        assert (event.node, event.type, event.message) == expected
