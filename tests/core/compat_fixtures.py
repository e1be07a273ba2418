"""Shared by the compatibility tests: a pinned CUDA 12 floor and `one_line`, which checks a verdict's reason."""

from __future__ import annotations

from upgrader.core.compat.cuda import Floors, Verdict

PINNED: Floors = {12: (525, 60, 13)}  # "older CUDA 12 notes said >= 525.60.13" (docs/compatibility.md)


def one_line(verdict: Verdict) -> Verdict:
    """Every verdict carries one non-empty line of reason, and a path exactly on admissions by check."""
    assert verdict.reason and "\n" not in verdict.reason, verdict
    return verdict
