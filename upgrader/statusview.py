"""Render the rollout status for people: one screen, blockers first."""

from __future__ import annotations

from typing import Any

from upgrader.core.states import STATE_COUNT_KEYS, UNLABELLED, State

SHORT = {
    State.UPGRADE_REQUIRED.value: "required",
    State.CORDON_REQUIRED.value: "cordon",
    State.WAIT_FOR_JOBS_REQUIRED.value: "jobs",
    State.POD_DELETION_REQUIRED.value: "pod-del",
    State.DRAIN_REQUIRED.value: "drain",
    State.POD_RESTART_REQUIRED.value: "restart",
    State.VALIDATION_REQUIRED.value: "validate",
    State.UNCORDON_REQUIRED.value: "uncordon",
    State.DONE.value: "done",
    State.FAILED.value: "failed",
    UNLABELLED: "unlabelled",
}


def bar(done: int, total: int, width: int = 20) -> str:
    filled = round(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


def progress_line(status: dict[str, Any], elapsed: float | None = None) -> str:
    """One line: phase, domain, nodes per state (non-zero only)."""
    by_state = status.get("nodes_by_state", {})
    counts = " ".join(f"{SHORT[b]}={by_state[b]}" for b in STATE_COUNT_KEYS if by_state.get(b))
    prefix = f"[{elapsed:6.1f}s] " if elapsed is not None else ""
    domain = status.get("current_domain") or "-"
    return f"{prefix}{status.get('phase', '?'):<8} domain {domain:<12} {counts}"


def render_table(status: dict[str, Any]) -> str:
    lines = [f"PHASE: {status.get('phase')}   {status.get('message', '')}"]
    lines.append(f"UPDATED: {status.get('updated_at', '')}   NODES: {status.get('nodes_total', 0)}")
    blocked = status.get("blocked") or []
    if blocked:
        lines.append("")
        lines.append("BLOCKED")
        for b in blocked:
            lines.append(f"  {b['node']:<16} {b['state']:<24} since {b['since']}  {b['reason']}  ({b['runbook']})")
    failed = status.get("failed") or []
    if failed:
        lines.append("")
        lines.append("FAILED")
        for f in failed:
            ack = " [acknowledged]" if f.get("acknowledged") else ""
            where = f" in {f['state']}" if f.get("state") else ""
            lines.append(f"  {f['node']:<16}{where} at {f['since']}{ack}  {f['reason']}  ({f['runbook']})")
    waiting = status.get("waiting") or []
    if waiting:
        lines.append("")
        lines.append("WAITING")
        for w in waiting:
            lines.append(f"  {w['node']:<16} {w['state']:<24} {w['reason']}")
    lines.append("")
    lines.append("NODES BY STATE")
    counts = status.get("nodes_by_state") or {}
    for bucket in STATE_COUNT_KEYS:  # lifecycle order, whatever order the stored JSON has
        lines.append(f"  {bucket:<24} {counts.get(bucket, 0)}")
    domains = status.get("domains") or []
    if domains:
        lines.append("")
        lines.append("DOMAINS")
        for d in domains:
            mark = " (canary)" if d.get("canary") else ""
            current = " <- current" if d["name"] == status.get("current_domain") else ""
            lines.append(
                f"  {d['name'] + mark:<22} {bar(d['done'], d['nodes'])} {d['done']}/{d['nodes']} done, "
                f"{d['in_progress']} in progress, {d['failed']} failed{current}"
            )
    for label, key in (("SKIPPED", "skipped"), ("INVALID", "invalid")):
        items = status.get(key) or []
        if items:
            lines.append("")
            lines.append(
                f"{label}: " + ", ".join(i if isinstance(i, str) else f"{i['node']} ({i['reason']})" for i in items)
            )
    return "\n".join(lines)
