"""The operators' intent (a pause, acknowledged failures) lives in the control ConfigMap, which only
people and `upgrader pause/resume/acknowledge` write: losing the status loses no intent, and the
controller never writes intent from nothing (docs/operations.md, runbooks/pause-resume.md). Real
kubectl deletes what an admin would delete; the controller talks through the official client over HTTP, its
passes a virtual second apart on the emulator's virtual clock (conftest `rollout(..., virtual=True)`)."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.commands.cli import main
from upgrader.core.model.states import State

from .conftest import Rollout

STATUS = "gpu-driver-upgrade-status"
CONTROL = "gpu-driver-upgrade-control"


def _paused_with_starts(r: Rollout) -> int:
    r.run_until(("Running",), timeout=30)
    assert main(["pause", "--kubeconfig", str(r.kubeconfig)]) == 0
    r.run_until(("Paused",), timeout=30, hold=1.0)
    return len(r.recorder.starts())


def test_a_pause_survives_the_status_configmap_being_deleted(rollout: Any) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    started = _paused_with_starts(r)
    r.kubectl("-n", "gpu-operator", "delete", "configmap", STATUS)
    status = r.run_until(("Paused",), timeout=30, hold=2.0)
    assert len(r.recorder.starts()) == started, "no node started after the status was deleted"
    assert status["nodes_by_state"][State.UPGRADE_REQUIRED.value] == 6 - started
    rewritten = r.cluster.get("configmaps", STATUS, "gpu-operator")
    assert rewritten is not None and "paused" not in rewritten["data"], "the controller writes no intent"
    assert main(["resume", "--kubeconfig", str(r.kubeconfig)]) == 0
    r.run_until(("Done",), timeout=90)


def test_resume_ends_a_pause_whose_status_was_deleted_before_the_controller_wrote_it_again(rollout: Any) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    _paused_with_starts(r)
    r.kubectl("-n", "gpu-operator", "delete", "configmap", STATUS)
    assert main(["resume", "--kubeconfig", str(r.kubeconfig)]) == 0, "the control ConfigMap names the namespace"
    control = r.cluster.get("configmaps", CONTROL, "gpu-operator") or {}
    assert control["data"]["paused"] == "false"
    r.run_until(("Done",), timeout=90)


def test_a_pause_the_last_status_recorded_stays_when_its_control_object_is_deleted(rollout: Any) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    started = _paused_with_starts(r)
    r.kubectl("-n", "gpu-operator", "delete", "configmap", CONTROL)
    status = r.run_until(("Paused",), timeout=30, hold=2.0)
    assert len(r.recorder.starts()) == started
    assert status["message"] == (
        f"paused: configmap gpu-operator/{CONTROL} is gone, and the last status recorded a pause: it stays in "
        "force; `upgrader resume` continues"
    )
    assert r.cluster.get("configmaps", CONTROL, "gpu-operator") is None, "never written from nothing"
    assert main(["resume", "--kubeconfig", str(r.kubeconfig)]) == 0
    r.run_until(("Done",), timeout=90)


def test_a_pause_an_older_cli_left_in_the_status_is_carried_over(rollout: Any) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    r.run_until(("Running",), timeout=30)
    r.kubectl("-n", "gpu-operator", "patch", "configmap", STATUS, "--type=merge", "-p",
              '{"data":{"paused":"true","resumedAt":"2026-01-01T00:00:00Z"}}')
    started = len(r.recorder.starts())
    r.run_until(("Paused",), timeout=30, hold=1.0)
    assert len(r.recorder.starts()) <= started + 1  # a start in flight when the patch landed may finish
    assert main(["resume", "--kubeconfig", str(r.kubeconfig)]) == 0
    left = (r.cluster.get("configmaps", STATUS, "gpu-operator") or {}).get("data") or {}
    assert "paused" not in left and "resumedAt" not in left, "resume clears the older keys"
    r.run_until(("Done",), timeout=90)


@pytest.mark.parametrize(
    ("argv", "code", "err"),
    [
        (["acknowledge"], 2, "upgrader: error: acknowledge: name the failed nodes, or give --all (not both)\n"),
        (["acknowledge", "gpu-a-01"], 1, "upgrader: cannot acknowledge: node gpu-a-01 is not upgrade-failed "
                                         "(nothing written)\n"),
        (["acknowledge", "--all"], 1, "upgrader: cannot acknowledge: no node is upgrade-failed: nothing to "
                                      "acknowledge\n"),
    ],
)
def test_acknowledge_refuses_what_it_cannot_name(
    rollout: Any, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, err: str
) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    r.run_until(("Running",), timeout=30)
    writes = len([q for q in r.cluster.requests if q.method != "GET"])
    capsys.readouterr()
    assert main([*argv, "--kubeconfig", str(r.kubeconfig), "-n", "gpu-operator"]) == code
    assert capsys.readouterr().err == err
    assert len([q for q in r.cluster.requests if q.method != "GET"]) == writes
