"""Crash, two-replica and API-fault campaigns: short in CI, full with UPGRADER_CAMPAIGN=full (see campaigns.py)."""

from __future__ import annotations

from pathlib import Path

from .campaigns import FULL, Figures, fault_campaign, kill_campaign, replica_campaign

PATHS = ("adoptions", "drain fallbacks", "failed nodes recovered", "restart-only restarts")


def took_the_operators_paths(figures: Figures) -> None:
    """The campaign was not vacuous for the GPU Operator's paths: each happened in its rollouts."""
    assert all(figures.counts[path] >= 1 for path in PATHS), figures.line()


def test_sigkill_campaign(tmp_path: Path) -> None:
    figures = kill_campaign(tmp_path, kills=100 if FULL else 6, seed=20261129)
    print(figures.line())
    assert figures.counts["kills"] >= (100 if FULL else 6)
    assert figures.violations == []
    took_the_operators_paths(figures)


def test_two_replicas_campaign(tmp_path: Path) -> None:
    figures = replica_campaign(tmp_path, rollouts=8 if FULL else 2, seed=7)
    print(figures.line())
    assert figures.counts["leader kills"] >= (4 if FULL else 1)
    assert figures.violations == []
    took_the_operators_paths(figures)


def test_api_fault_campaign(tmp_path: Path) -> None:
    figures = fault_campaign(tmp_path, rollouts=6 if FULL else 1, seed=5)
    print(figures.line())
    injected = sum(v for k, v in figures.counts.items() if k.startswith("injected"))
    assert injected > 0, "faults were really injected"
    kinds = {"injected error500", "injected throttle429", "injected conflict409", "injected drop"}
    assert kinds <= set(figures.counts), "every fault kind was injected"
    assert figures.violations == []
    took_the_operators_paths(figures)
