"""Table-driven tests of `upgrader.sim.apiserver.eviction.compute_status`: a PDB's status from its pods."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.sim.apiserver.eviction import compute_status, scaled


def pod(
    name: str, ready: bool = True, phase: str = "Running", terminating: bool = False, app: str = "web"
) -> Any:
    meta: dict[str, Any] = {"name": name, "labels": {"app": app}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    return {
        "metadata": meta,
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pdb(**spec: Any) -> Any:
    spec.setdefault("selector", {"matchLabels": {"app": "web"}})
    return {"metadata": {"name": "web", "generation": 3}, "spec": spec}


FOUR_READY = [pod(f"p{i}") for i in range(4)]
MIXED = [
    pod("ready-1"),
    pod("ready-2"),
    pod("ready-3"),
    pod("unready", ready=False),
    pod("leaving", terminating=True),
    pod("finished", ready=False, phase="Succeeded"),
    pod("stranger", app="db"),
]


@pytest.mark.parametrize(
    ("spec", "pods", "expected"),
    [
        # (expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed)
        ({"minAvailable": 2}, FOUR_READY, (4, 4, 2, 2)),
        ({"minAvailable": 4}, FOUR_READY, (4, 4, 4, 0)),
        ({"minAvailable": 6}, FOUR_READY, (4, 4, 6, 0)),
        ({"minAvailable": "50%"}, FOUR_READY, (4, 4, 2, 2)),
        ({"minAvailable": "51%"}, FOUR_READY, (4, 4, 3, 1)),  # percentages round up
        ({"minAvailable": "100%"}, FOUR_READY, (4, 4, 4, 0)),
        ({"maxUnavailable": 1}, FOUR_READY, (4, 4, 3, 1)),
        ({"maxUnavailable": 5}, FOUR_READY, (4, 4, 0, 4)),
        ({"maxUnavailable": "25%"}, FOUR_READY, (4, 4, 3, 1)),
        ({"maxUnavailable": "26%"}, FOUR_READY, (4, 4, 2, 2)),  # unavailable rounds up too
        ({"maxUnavailable": "0%"}, FOUR_READY, (4, 4, 4, 0)),
        ({"minAvailable": 0}, [], (0, 0, 0, 0)),  # nothing expected: nothing may be disrupted
        ({"maxUnavailable": 1}, [], (0, 0, 0, 0)),
        # terminating pods are expected but not healthy; finished pods only count for an integer
        # minAvailable, which expects every pod its selector lists
        ({"minAvailable": 2}, MIXED, (6, 3, 2, 1)),
        ({"minAvailable": "50%"}, MIXED, (5, 3, 3, 0)),
        ({"maxUnavailable": 1}, MIXED, (5, 3, 4, 0)),
        ({"maxUnavailable": 3}, MIXED, (5, 3, 2, 1)),
        ({"minAvailable": 1, "selector": {}}, MIXED, (7, 4, 1, 3)),  # an empty selector selects all
        ({"minAvailable": 1, "selector": None}, MIXED, (0, 0, 1, 0)),  # no selector selects none
        ({}, FOUR_READY, (4, 4, 4, 0)),  # neither field: as strict as can be
    ],
)
def test_compute_status(spec: dict[str, Any], pods: list[Any], expected: tuple[int, int, int, int]) -> None:
    status = compute_status(pdb(**spec), pods)
    got = (
        status["expectedPods"],
        status["currentHealthy"],
        status["desiredHealthy"],
        status["disruptionsAllowed"],
    )
    assert got == expected
    assert status["observedGeneration"] == 3


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [(3, 10, 3), ("3", 10, 3), ("10%", 10, 1), ("11%", 10, 2), ("0%", 10, 0), ("100%", 7, 7), ("50%", 0, 0)],
)
def test_scaled_rounds_percentages_up(value: int | str, total: int, expected: int) -> None:
    assert scaled(value, total) == expected
