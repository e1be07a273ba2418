"""Which runbook page (runbooks/<name>.md) explains each way a node stops or a rollout halts."""

from __future__ import annotations

RUNBOOKS = {
    "pdb": "pdb-blocked-eviction",
    "wait-for-jobs": "wait-for-jobs-timeout",
    "pod-deletion": "gpu-pod-deletion-blocked",
    "drain": "drain-blocked",
    "gpu-pods": "gpu-pods-still-running",
    "cordon-record": "cordon-record-missing",
    "driver-daemonset": "driver-daemonset-missing",
    "state-label": "state-label-moved",
    "image": "missing-driver-image",
    "driver-restart": "driver-pod-not-ready",
    "validation": "validation-failure",
    "failed": "upgrade-failed-recovery",
    "halted": "rollout-halted",
    "paused": "pause-resume",
}


def runbook_for(kind: str) -> str:
    return f"runbooks/{RUNBOOKS.get(kind, RUNBOOKS['halted'])}.md"
