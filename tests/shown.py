"""A pass's status as people and scripts read it: the dict the cluster stores and `upgrader status -o json`
prints (core/report/document.py `to_dict`). End-to-end tests judge that, not the typed document."""

from __future__ import annotations

from typing import Any

from upgrader.core.report.document import RolloutStatus, to_dict


def shown(status: RolloutStatus | None) -> dict[str, Any]:
    """{} for a pass that judged no status (it failed, or no valid spec ever)."""
    return to_dict(status) if status is not None else {}
