"""`upgrader status` and `upgrader promote` with policy pools: a POOLS section a line a pool, and a
promotion that names the pool when more than one waits (docs/policy.md#pools)."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.commands.promote import _promotable
from upgrader.commands.status import Refused
from upgrader.commands.statusview import render_table

GATE = {"reason": "awaiting-promotion", "stage": "inference:us-east-1c", "finished_at": "2026-12-03T10:00:00Z"}
STATUS: dict[str, Any] = {
    "phase": "Halted", "message": "halted: pool training: gpu-a-01 blocked", "nodes_total": 12,
    "nodes_by_state": {"upgrade-done": 3},
    "pools": [
        {"name": "training", "phase": "Halted", "halt_reason": "gpu-a-01 blocked in drain-required", "nodes_total": 6,
         "nodes_by_state": {"upgrade-done": 1}, "current_domain": "us-east-1a", "waiting_on": None},
        {"name": "inference", "phase": "Running", "halt_reason": None, "nodes_total": 6,
         "nodes_by_state": {"upgrade-done": 2}, "current_domain": "us-east-1c", "waiting_on": GATE,
         "waiting_since": "2026-12-03T10:00:01Z"},
    ],
}


def test_the_table_has_a_line_a_pool_with_its_halt_or_wait() -> None:
    text = render_table(STATUS)
    lines = text.splitlines()
    at = lines.index("POOLS")
    assert lines[at + 1:at + 3] == [
        "  training         Halted   domain us-east-1a   [##........] 1/6 done  gpu-a-01 blocked in drain-required",
        "  inference        Running  domain us-east-1c   [###.......] 2/6 done  waiting on awaiting-promotion "
        "since 2026-12-03T10:00:01Z",
    ]


def test_promote_takes_the_one_pool_that_waits_and_asks_which_when_several_do() -> None:
    assert _promotable(STATUS) == ("inference:us-east-1c", "2026-12-03T10:00:00Z")
    assert _promotable(STATUS, "inference") == ("inference:us-east-1c", "2026-12-03T10:00:00Z")
    two = {**STATUS, "pools": [{**p, "waiting_on": {**GATE, "stage": f"{p['name']}:x"}} for p in STATUS["pools"]]}
    with pytest.raises(Refused) as refused:
        _promotable(two)
    assert str(refused.value) == (
        "pools training, inference each wait on a stage: say which with --pool (nothing written)")
    with pytest.raises(Refused) as refused:
        _promotable(STATUS, "serving")
    assert str(refused.value) == "no pool serving in the rollout (pools: training, inference; nothing written)"
    with pytest.raises(Refused) as refused:
        _promotable({"phase": "Running", "waiting_on": None}, "inference")
    assert str(refused.value) == "nothing to promote in pool inference: the policy has no pools (nothing written)"
