"""`upgrader plan` shows the canary domain's first nodes (failureDomains.canaryNodes) as waves of their
own, before the rest of the canary domain, in the table and in JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_plan_budgets import plan

POLICY = {"maxParallelUpgrades": 20, "maxUnavailable": "100%",
          "failureDomains": {"canary": "us-east-1a", "canaryNodes": 2}}


def test_the_first_canary_nodes_are_a_wave_of_their_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    waves = json.loads(plan(tmp_path, capsys, POLICY, output="json", nodes=30))["waves"]
    assert [(w["domain"], len(w["nodes"]), w.get("canary_nodes", False)) for w in waves] == [
        ("us-east-1a", 2, True), ("us-east-1a", 8, False), ("us-east-1b", 10, False), ("us-east-1c", 10, False)]
    table = plan(tmp_path, capsys, POLICY, nodes=30)
    assert "WAVE 1 (us-east-1a, canary nodes)" in table and "WAVE 2 (us-east-1a)" in table


def test_without_canary_nodes_the_canary_domain_is_one_wave(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = {**POLICY, "failureDomains": {"canary": "us-east-1a"}}
    waves = json.loads(plan(tmp_path, capsys, policy, output="json", nodes=30))["waves"]
    assert [(w["domain"], len(w["nodes"])) for w in waves][:1] == [("us-east-1a", 10)]
    assert not any(w.get("canary_nodes") for w in waves)
