"""Render the rollout status for people: one screen, blockers first."""

from __future__ import annotations

import textwrap
from typing import Any

from upgrader.commands.liveness import ControllerSeen, ago
from upgrader.core.model.states import STATE_COUNT_KEYS, UNLABELLED, State
from upgrader.core.model.timefmt import parse_or_none

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


def updated(status: dict[str, Any], now: float | None) -> str:
    """When the status was written, and how long ago (it is rewritten only when it changes)."""
    stamp = str(status.get("updated_at") or "(never)")
    written = parse_or_none(stamp) if now is not None else None
    return stamp if written is None or now is None else f"{stamp} ({ago(now - written)} ago)"


def header(status: dict[str, Any], controller: ControllerSeen | None, now: float | None) -> list[str]:
    """The warning that no controller acts (first: it changes how to read everything below), the phase,
    when the status was written, and who holds the Lease."""
    warning = controller.warning(now or 0.0) if controller is not None else None
    lines = [warning] if warning else []
    lines.append(f"PHASE: {status.get('phase')}   {status.get('message', '')}")
    lines.append(f"UPDATED: {updated(status, now)}   NODES: {status.get('nodes_total', 0)}{eta_text(status)}")
    if controller is not None:
        lines.append(controller.line(now or 0.0))
    return lines + refused_spec_lines(status)


def eta_text(status: dict[str, Any]) -> str:
    """`   ETA: <time> (<n> nodes left, <s>s a node, median of <m>)`, when the status has one."""
    eta = status.get("eta") or {}
    if not eta.get("at"):
        return ""
    return (f"   ETA: {eta['at']} ({eta['nodes_left']} nodes left, {eta['node_seconds']}s a node, "
            f"median of {eta['from_nodes']})")


def refused_spec_lines(status: dict[str, Any]) -> list[str]:
    """A spec the controller refused (Valid=False): said under the phase, as the rollout it shows runs
    on the last valid spec, not on what the object now says."""
    rollout = status.get("rollout") or {}
    for cond in rollout.get("conditions") or []:
        if cond.get("type") == "Valid" and cond.get("status") == "False":
            since = f" since {cond['lastTransitionTime']}" if cond.get("lastTransitionTime") else ""
            return [f"SPEC REFUSED (generation {rollout.get('generation')}){since}: {cond.get('message', '')}"]
    return []


def gate_lines(status: dict[str, Any]) -> list[str]:
    """What paces starts besides the budgets: the wait and since when, the window, the alert gate."""
    lines = []
    wait = status.get("waiting_on")
    if wait:
        since = f" since {status['waiting_since']}" if status.get("waiting_since") else ""
        lines.append(f"WAITING ON: {wait.get('reason')}{since}")
    window = status.get("maintenance_window")
    if window:
        if window.get("open"):
            until = f" until {window['closes_at']}" if window.get("closes_at") else ""
            lines.append(f"WINDOW: open, {window.get('about')}{until}")
        else:
            nxt = window.get("next_open")
            lines.append(
                f"WINDOW: closed; the next, {window.get('about')}, opens at {nxt}"
                if nxt
                else "WINDOW: closed; none opens within 8 years"
            )
    gate = status.get("alert_gate")
    if gate:
        where = f"Prometheus {gate.get('prometheus')}"
        if gate.get("open"):
            lines.append(f"ALERT GATE: open, no matching alert firing in {where}")
        elif gate.get("error"):
            lines.append(f"ALERT GATE: closed, cannot read {where}: {gate['error']}")
        else:
            lines.append(f"ALERT GATE: closed, firing in {where}: {', '.join(gate.get('firing') or [])}")
    return lines


def pool_entries(status: dict[str, Any]) -> list[str]:
    """A line a pool (a policy with pools): its phase, domain, progress, and its wait or halt."""
    out = []
    for p in status.get("pools") or []:
        done, total = (p.get("nodes_by_state") or {}).get(State.DONE.value, 0), p.get("nodes_total") or 0
        wait = p.get("waiting_on") or {}
        why = p.get("halt_reason") if p.get("phase") == "Halted" else (
            f"waiting on {wait['reason']}" + (f" since {p['waiting_since']}" if p.get("waiting_since") else "")
            if wait else "")
        out.append(f"  {p['name']:<16} {p.get('phase', '?'):<8} domain {p.get('current_domain') or '-':<12} "
                   f"{bar(done, total, 10)} {done}/{total} done{'  ' + why if why else ''}")
    return out


def wide_lines(status: dict[str, Any]) -> list[str]:
    """`status -o wide`: where the rollout is in its domain order, what it waits on, what it installs."""
    lines = ["", "ROLLOUT"]
    lines.append(f"  {'current domain':<16} {status.get('current_domain') or '-'}")
    lines.append(f"  {'next domain':<16} {status.get('next_domain') or '-'}")
    wait = status.get("waiting_on")
    if wait:
        where = f" in {wait['domain']}" if wait.get("domain") else ""
        until = f" until {wait['until']}" if wait.get("until") else ""
        since = f" since {status['waiting_since']}" if status.get("waiting_since") else ""
        runbook = f"  ({wait['runbook']})" if wait.get("runbook") else ""
        lines.append(f"  {'waiting on':<16} {wait['reason']}{where}{since}{until}{runbook}")
    targets = status.get("targets") or []
    if targets:
        lines += ["", "TARGETS"]
        for t in targets:
            lines.append(f"  {t['daemonset']:<40} driver {t['driver_version'] or '-'}  revision {t['revision'] or '-'}")
    return lines


def render_table(
    status: dict[str, Any], controller: ControllerSeen | None = None, now: float | None = None, wide: bool = False
) -> str:
    lines = header(status, controller, now) + gate_lines(status)
    pools = pool_entries(status)
    if pools:
        lines += ["", "POOLS", *pools]
    if wide:
        lines += wide_lines(status)
    blocked = status.get("blocked") or []
    if blocked:
        lines.append("")
        lines.append("BLOCKED")
        for b in blocked:
            lines.append(f"  {b['node']:<16} {b['state']:<24} since {b['since']}  {b['reason']}  ({b['runbook']})")
    held = status.get("held") or []
    if held:
        lines.append("")
        lines.append("HELD AT upgrade-required (preflight)")
        for h in held:
            lines.append(f"  {h['node']:<16} {h['kind']:<24} since {h['since']}  {h['reason']}  ({h['runbook']})")
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


# ----- `status --watch`: one frame that fits the terminal (80x24 at least) -------------------------


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def _wrap(text: str, width: int, lines: int) -> list[str]:
    return textwrap.wrap(text, width, max_lines=lines, placeholder=" ...") or [""]


def _sections(status: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """What a halted rollout's operator looks for, most urgent first."""
    current = status.get("current_domain")
    domains = [  # `>` marks the current domain
        f"{'>' if d['name'] == current else ' '} {d['name'][:20] + (' (canary)' if d.get('canary') else ''):<29} "
        f"{bar(d['done'], d['nodes'], 10)} {d['done']}/{d['nodes']} done, {d['in_progress']} active, "
        f"{d['failed']} failed"
        for d in status.get("domains") or []
    ]
    return [
        ("BLOCKED", [f"  {b['node']} {SHORT.get(b['state'], b['state'])} since {b['since']}: {b['reason']}"
                     for b in status.get("blocked") or []]),
        ("FAILED", [f"  {f['node']} {SHORT.get(f.get('state') or '', f.get('state') or '')} at {f['since']}"
                    f"{' [ack]' if f.get('acknowledged') else ''}: {f['reason']}" for f in status.get("failed") or []]),
        ("HELD", [f"  {h['node']} {h['kind']} since {h['since']}: {h['reason']}" for h in status.get("held") or []]),
        ("POOLS", pool_entries(status)),
        ("DOMAINS", domains),
        ("WAITING", [f"  {w['node']} {SHORT.get(w['state'], w['state'])}: {w['reason']}"
                     for w in status.get("waiting") or []]),
    ]


def _cost(count: int, cap: int) -> int:
    """Lines a section takes showing at most `cap` entries: title, entries, an "and N more" line."""
    return 1 + min(count, cap) + (1 if 0 < cap < count else 0)


def _fit(sections: list[tuple[str, list[str]]], budget: int) -> list[str]:
    """The sections in `budget` lines: every section shows as many entries as the same cap allows
    (small sections whole, big ones cut), dropping the least urgent sections when titles alone do not fit."""
    shown = [(title, items) for title, items in sections if items]
    while shown and _cost(1, 0) * len(shown) > budget:
        shown.pop()
    cap = max((len(items) for _, items in shown), default=0)
    while cap > 0 and sum(_cost(len(items), cap) for _, items in shown) > budget:
        cap -= 1
    lines = []
    for title, items in shown:
        lines.append(f"{title} ({len(items)})")
        lines.extend(items[:cap])
        if 0 < cap < len(items):
            lines.append(f"  ... and {len(items) - cap} more (upgrader status lists all)")
    return lines


def render_watch(
    status: dict[str, Any], controller: ControllerSeen | None, now: float, width: int = 80, height: int = 24
) -> str:
    """One `status --watch` frame in `width` x `height`: the phase and why first, then blockers,
    failures, domains and waits, as many as fit."""
    warning = controller.warning(now) if controller is not None else None
    lines = _wrap(warning, width, 2) if warning else []
    nodes = status.get("nodes_total", 0)
    lines.append(f"PHASE: {status.get('phase')}   nodes {nodes}   updated {updated(status, now)}")
    lines.extend(_wrap(str(status.get("message") or ""), width, 4))  # the halt reason: why nothing moves
    if controller is not None and controller.alive:
        lines.append(controller.line(now))
    by_state = status.get("nodes_by_state") or {}
    counts = " ".join(f"{SHORT[b]}={by_state[b]}" for b in STATE_COUNT_KEYS if by_state.get(b))
    lines.extend(_wrap(f"NODES {counts}", width, 2))
    lines.extend(_fit(_sections(status), height - len(lines)))
    return "\n".join(_clip(line, width) for line in lines[:height])
