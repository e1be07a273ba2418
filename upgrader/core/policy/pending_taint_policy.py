"""The policy's `taintPendingNodes`: whether nodes still to be upgraded carry our PreferNoSchedule
taint, and whether a pause takes it off (core/rollout/pending_taint.py does it)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class OnPause(StrEnum):
    KEEP = "keep"
    REMOVE = "remove"


class TaintPendingNodes(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    enable: bool = Field(False, strict=True)
    on_pause: OnPause = Field(OnPause.KEEP, alias="onPause")
