"""policies/images.example.txt, the ledger the README points at, is read by `plan --ledger` as written
(issue 13, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from upgrader.core.compat.images import parse_ledger

from .test_plan import ROOT, findings, node, plan

EXAMPLE = ROOT / "policies" / "images.example.txt"


def test_the_example_ledger_parses() -> None:
    assert parse_ledger(EXAMPLE.read_text(encoding="utf-8")) == {
        "550-5.15.0-105-generic-ubuntu22.04",
        "550-5.15.0-113-generic-ubuntu22.04",
    }


def test_the_readme_points_at_it() -> None:
    assert "--ledger policies/images.example.txt" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_image_of_the_emulators_fleet_is_in_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, result = plan(tmp_path, capsys, "healthy", extra=["--ledger", str(EXAMPLE)])
    assert code == 0
    assert findings(result, "missing-driver-image") == []
    assert {n["image_in_ledger"] for n in result["nodes"]} == {True}


def test_the_missing_image_scenarios_node_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, result = plan(tmp_path, capsys, "missing-image", extra=["--ledger", str(EXAMPLE)])
    assert code == 1
    assert [f["node"] for f in findings(result, "missing-driver-image")] == ["gpu-a-02"]
    assert node(result, "gpu-a-02")["image_in_ledger"] is False
    assert sum(1 for n in result["nodes"] if n["image_in_ledger"]) == len(result["nodes"]) - 1
