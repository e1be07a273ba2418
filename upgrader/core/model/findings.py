"""What a plan finds: each finding says what, how bad, where, and what a person can do."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

BLOCKING = "blocking"
WARNING = "warning"

KINDS = (
    "missing-driver-image",
    "pdb-blocks-eviction",
    "wait-for-jobs",
    "cuda-incompatible",
    "unqualified-profile",
    "conflicting-node-selector",
    "conflicting-driver-daemonsets",
    "invalid-node-data",
    "pod-deletion-blocked",
    "not-scheduled",
    "failed-node",
    "max-unavailable-zero",
    "insufficient-gpu-capacity",
    "preflight-input",
    "gpu-operator-auto-upgrade",
    "driver-update-strategy",
    "pdb-selects-driver-pod",
    "empty-pool",
)


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str  # blocking | warning
    node: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
