"""Kubernetes timestamps (RFC 3339, UTC) to and from epoch seconds. Pure: never reads a clock."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(t: float) -> str:
    """Kubernetes' timestamp format (second precision, UTC, trailing Z)."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(t: float) -> str:
    """MicroTime, as leases and events.k8s.io events carry."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(s: str) -> float:
    """Parse the timestamps Kubernetes and upgrader write; ValueError when it is not one."""
    text = s.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {s!r} has no time zone")
    return parsed.timestamp()


def parse_or_none(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return parse_rfc3339(s)
    except ValueError:
        return None
