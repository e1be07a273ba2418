"""Render a plan for a person: blockers first, then the waves, one screen."""

from __future__ import annotations

from upgrader.core.model.findings import BLOCKING
from upgrader.core.model.timefmt import rfc3339
from upgrader.core.plan.report import Plan
from upgrader.core.plan.wave_windows import MISSING, Prediction, note, span
from upgrader.core.policy.windows import YEARS, Verdict, local_text


def window_line(window: Verdict) -> str:
    """`WINDOWS:` as `run` judges them now: open until when, or closed until when."""
    count = f"{window.windows} maintenance window{'s' if window.windows > 1 else ''}"
    if window.open:
        until = (
            f"until {rfc3339(window.closes_at)} ({window.local(window.closes_at)})"
            if window.closes_at is not None
            else "with no close in the next 8 days"
        )
        return f"WINDOWS: open now, {window.about}, {until}; {count}"
    if window.next_open is None:
        return f"WINDOWS: closed now and none opens within 8 years: no node starts; {count}"
    return (
        f"WINDOWS: closed now: no node starts before {window.about} opens at {rfc3339(window.next_open)} "
        f"({window.local(window.next_open)}); {count}"
    )


def waves_in_windows(prediction: Prediction) -> list[str]:
    """`WAVES IN WINDOWS:` under `WINDOWS:`: what the times rest on, then per wave when it starts, in
    which window (local time of that window's zone), when it ends, and how far past the close."""
    if prediction.duration is None:
        return [f"WAVES IN WINDOWS: {MISSING}"]
    if not prediction.slots:
        return ["WAVES IN WINDOWS: no wave to place"]
    rows: list[tuple[str, str]] = []
    for slot in prediction.slots:
        title = f"WAVE {slot.wave} ({slot.domain})" if slot.wave else f"IN PROGRESS ({slot.domain})"
        if slot.wave == 0 and slot.ends_at is not None:
            rows.append((title, f"started already, ends by {local_text(slot.ends_at, prediction.zone)}"))
        elif slot.starts_at is not None and slot.ends_at is not None:
            text = f"starts {slot.local(slot.starts_at)} in {slot.window}, ends {slot.local(slot.ends_at)}"
            if slot.past_close and slot.closes_at is not None:
                text += f", {span(slot.past_close)} past its close at {slot.local(slot.closes_at)}"
            rows.append((title, text))
    never = [s for s in prediction.slots if s.wave and s.starts_at is None]
    if never and prediction.never_after is not None:  # once one wave cannot start, no later one does
        first, last = never[0], never[-1]
        title = f"WAVE {first.wave} ({first.domain})" if first is last else f"WAVES {first.wave}-{last.wave}"
        after = local_text(prediction.never_after, prediction.zone)
        verb = "never starts" if first is last else "never start"
        rows.append((title, f"{verb}: no maintenance window opens within {YEARS} years after {after}"))
    width = max(len(title) for title, _ in rows)
    return [f"WAVES IN WINDOWS: {note(prediction)}", *(f"  {title:<{width}}  {text}" for title, text in rows)]


def render_plan(plan: Plan) -> str:
    data = plan.to_dict()
    summary = data["summary"]
    lines = [
        f"PLAN (dry run): {summary['to_upgrade']} of {summary['nodes']} nodes to upgrade in {len(plan.waves)} waves; "
        f"canary domain {plan.canary or '-'}",
        f"BUDGETS: {summary['budgets']}",  # as `run` resolves them on this fleet
        *([window_line(plan.window)] if plan.window.windows else []),  # as `run` judges them now
        *(waves_in_windows(plan.wave_windows) if plan.wave_windows else []),  # with --wave-duration
        f"FINDINGS: {summary['blocking']} blocking, {summary['warnings']} warnings",
    ]
    for finding in plan.findings:
        mark = "BLOCKING" if finding.severity == BLOCKING else "warning "
        lines.append(f"  {mark} {finding.kind:<26} {finding.node or '-':<16} {finding.message}")
    lines.append("")
    header = (
        f"  {'NODE':<16} {'DOMAIN':<14} {'STATE':<22} {'CURRENT':<11} {'TARGET':<11} {'IMAGE':<44} "
        f"{'LEDGER':<7} GPU-PODS"
    )
    by_wave: dict[str, list[str]] = {}
    for node in plan.nodes:
        title = (
            f"WAVE {node.wave}"
            if node.wave
            else "IN PROGRESS"
            if node.wave == 0
            else {
                "up-to-date": "UP TO DATE",
                "skipped": "SKIPPED",
                "failed": "FAILED",
                "invalid": "INVALID",
            }.get(node.action, "NOT SCHEDULED")
        )
        ledger = {True: "yes", False: "MISSING", None: "-"}[node.image_in_ledger]
        gpu_pods = f"{len(node.gpu_pods)} stay (restart-only)" if node.restart_only else str(len(node.gpu_pods))
        blockers = sum(1 for f in node.findings if f.severity == BLOCKING)
        flag = f"  <- {blockers} blocking" if blockers else ""
        where = f"{node.domain}, canary nodes" if node.canary_first else node.domain
        where = f"pool {node.pool}, {where}" if node.pool else where
        by_wave.setdefault(f"{title} ({where})" if node.wave else title, []).append(
            f"  {node.name:<16} {node.domain:<14} {node.state or '-':<22} {node.current_driver or '?':<11} "
            f"{node.target_driver or '-':<11} {node.target_image or '-':<44} {ledger:<7} {gpu_pods}{flag}"
        )
    lines.append(header)
    for title, rows in by_wave.items():
        lines.append(title)
        lines.extend(rows)
    return "\n".join(lines).rstrip() + "\n"
