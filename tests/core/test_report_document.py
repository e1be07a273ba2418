"""The rollout status as one typed document (core/report/document.py): what the cluster stores is its
`to_dict`, in the keys it always had; what a controller reads back is the same document, and a
stored status it cannot wholly read is read as far as it can, never a stopped pass."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from upgrader.core.report.document import PoolStatus, RolloutStatus, read_status, to_dict
from upgrader.core.report.entries import (
    BackoffEntry,
    Budget,
    DomainCount,
    Eta,
    GateReport,
    InvalidNode,
    NodeBlocked,
    NodeFailed,
    NodeHeld,
    NodeInProgress,
    NodeWaiting,
    Target,
    WaitingOn,
    WaitNode,
    WindowReport,
)
from upgrader.core.report.kinds import Phase, WaitReason

T = "2026-12-04T10:00:00Z"
ZEROS = {"upgrade-done": 1, "upgrade-required": 2}
SOAK = WaitingOn(WaitReason.AWAITING_PROMOTION, "us-east-1a", (WaitNode("gpu-a-01", "done"),), 1, "gpu-b-01",
                 None, "runbooks/promotion.md", (), "training:us-east-1a/canaryNodes", T)
FIRING = WaitingOn(WaitReason.ALERT_FIRING, None, (), 0, alerts=("GPUServingSLOBurn",))
EVERY_PART = RolloutStatus(
    phase=Phase.HALTED,
    message="halted: pool training: gpu-a-02 blocked",
    halt_reason="pool training: gpu-a-02 blocked",
    paused=False,
    waiting_on=FIRING,
    waiting_since=T,
    maintenance_window=WindowReport(True, "nightly", "nightly (0 22 * * * UTC, 4h)", T, None),
    alert_gate=GateReport(False, "http://prometheus:9090", ("GPUServingSLOBurn",), None),
    nodes_total=3,
    nodes_by_state=ZEROS,
    domains=(DomainCount("us-east-1a", False, 3, 1, 0, 0, ZEROS),),
    eta=Eta(T, 600, 1, 2),
    targets=(Target("gpu-operator/nvidia-driver", "550.90.07", "7d9c"),),
    in_progress=(NodeInProgress("gpu-a-02", "pod-deletion-required", T),),
    interlocks=("the GPU Operator's own upgrade controller is on",),
    blocked=(NodeBlocked("gpu-a-02", "pod-deletion-required", "pdb", "refused", T, "runbooks/pdb.md"),),
    held=(NodeHeld("gpu-a-03", "image-missing", "no image", T, "runbooks/preflight-hold.md"),),
    waiting=(NodeWaiting("gpu-a-04", "pod-restart-required", "restarting", T),),
    failed=(NodeFailed("gpu-a-05", "validation", "not Ready", T, True, "validation-required", "runbooks/x.md", True),),
    skipped=("gpu-x-01",),
    invalid=(InvalidNode("gpu-y-01", "two driver DaemonSets"),),
    budget=Budget(1, None, 1, None),
    updated_at=T,
    pools=(PoolStatus("training", "nodeSelector pool=training", Phase.RUNNING, "awaiting promotion", waiting_on=SOAK,
                      waiting_since=T, nodes_total=3, nodes_by_state=ZEROS, current_domain="us-east-1a",
                      budget=Budget(1, 1, 1, 1)),),
    eviction_backoff={"ml/train": BackoffEntry(2, 0, T, 3)},
)
BARE = RolloutStatus(Phase.RUNNING, "rolling")


def stored(status: RolloutStatus) -> Any:
    """Through the JSON the status ConfigMap holds."""
    return json.loads(json.dumps(to_dict(status)))


@pytest.mark.parametrize("status", [EVERY_PART, BARE, replace(EVERY_PART, pools=None, eviction_backoff=None)])
def test_what_is_stored_reads_back_as_the_same_document(status: RolloutStatus) -> None:
    assert read_status(stored(status)) == status


def test_the_stored_keys_are_the_ones_the_status_always_had() -> None:
    assert list(stored(BARE)) == [
        "phase", "message", "halt_reason", "paused", "paused_since", "waiting_on", "waiting_since",
        "maintenance_window", "alert_gate", "nodes_total", "nodes_by_state", "current_domain", "next_domain",
        "domains", "eta", "targets", "in_progress", "interlocks", "blocked", "held", "waiting", "failed", "skipped",
        "invalid", "budget", "updated_at",
    ], "pools and eviction_backoff only when there are some"
    whole = stored(EVERY_PART)
    assert list(whole)[-2:] == ["pools", "eviction_backoff"]
    assert whole["waiting_on"] == {"reason": "alert-firing", "domain": None, "nodes": [], "count": 0, "next": None,
                                   "until": None, "runbook": None, "alerts": ["GPUServingSLOBurn"]}
    assert whole["pools"][0]["waiting_on"]["stage"] == "training:us-east-1a/canaryNodes"
    assert "alerts" not in whole["pools"][0]["waiting_on"], "alerts only for alert-firing"
    assert whole["eviction_backoff"] == {"ml/train": {"refusals": 2, "allowed": 0, "retry_at": T, "healthy": 3}}
    assert whole["failed"][0]["during_pause"] is True and whole["budget"]["max_parallel_upgrades"] is None


def test_an_entry_another_version_wrote_otherwise_is_left_out_and_the_rest_is_read() -> None:
    data = stored(EVERY_PART)
    data["failed"].append({"node": "gpu-z-01"})  # an entry missing what this version needs
    data["blocked"][0]["since"] = 5  # not a stamp
    data["waiting_on"] = {"reason": "a-reason-of-a-newer-version"}
    data["budget"] = "many"
    data["nodes_by_state"]["upgrade-done"] = "one"
    data["a-key-of-a-newer-version"] = {"x": 1}
    read = read_status(data)
    assert read is not None
    assert read.failed == EVERY_PART.failed and read.blocked == ()
    assert read.waiting_on is None and read.budget == Budget()
    assert read.nodes_by_state == {"upgrade-required": 2}
    assert read.pools == EVERY_PART.pools and read.eviction_backoff == EVERY_PART.eviction_backoff


@pytest.mark.parametrize("data", [None, {}, [], "Running", {"message": "no phase"}, {"phase": "Sideways"},
                                  {"phase": "Running", "message": ["not", "text"]}])
def test_a_status_it_cannot_read_at_all_is_none(data: object) -> None:
    assert read_status(data) is None


def test_settled_leaves_out_only_the_timestamp() -> None:
    later = replace(EVERY_PART, updated_at="2026-12-04T11:00:00Z")
    assert later != EVERY_PART and later.settled() == EVERY_PART.settled()
    assert replace(later, message="other").settled() != EVERY_PART.settled()
