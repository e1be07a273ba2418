"""A pass whose writes the API server refuses says the cause once at WARNING, not once per write: the
writes after the first with the same failure are DEBUG lines, and every one is counted."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from upgrader.controller.loop import _Writer
from upgrader.core.model.actions import Event, Outcome, Result, WriteStatus

FORBIDDEN = 'leases.coordination.k8s.io "gpu-driver-upgrader" is forbidden: User "upgrader" cannot get resource'


def test_one_warning_a_cause_a_pass(mocker: Any, caplog: pytest.LogCaptureFixture) -> None:
    applier = mocker.Mock(nodes={})
    applier.apply_one.side_effect = lambda action: Outcome(
        action, Result.ERROR, "503 injected" if action == OTHER else FORBIDDEN)
    writer = _Writer(mocker.Mock(elector=None), applier)
    actions = [Event("gpu-a-01", "Normal", "x"), Event("gpu-a-02", "Normal", "y"), WriteStatus({}), OTHER]
    with caplog.at_level(logging.DEBUG, logger="upgrader"):
        writer.apply(actions)
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("WARNING", f"Event on gpu-a-01 failed: {FORBIDDEN}"),
        ("DEBUG", f"Event on gpu-a-02 failed: {FORBIDDEN}"),
        ("DEBUG", f"WriteStatus on - failed: {FORBIDDEN}"),
        ("WARNING", "Event on gpu-b-01 failed: 503 injected"),
    ]
    assert len(writer.errors) == 4


OTHER = Event("gpu-b-01", "Normal", "z")
