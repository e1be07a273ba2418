"""Evictions a PodDisruptionBudget refused back off per budget instead of being sent every pass.

A refusal (HTTP 429) of an eviction covered by a budget doubles that budget's pause before the next
try, from BASE_SECONDS up to CAP_SECONDS; a budget whose `disruptionsAllowed` or `currentHealthy`
changes since (a pod became ready, someone raised it) is tried again at the next pass, and an
eviction it admits ends its backoff. Meanwhile each eviction it covers counts as refused without a
request, so the step blocks, waits and halts exactly as if the API server had said 429
(core/rollout/stepping.py `conclude`).

The backoff is kept in the rollout status (`eviction_backoff`), which the next pass reads back, so a
restarted controller goes on from it; times are RFC 3339 of the controller's clock, compared only
with that clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from upgrader.core.model.actions import Action, Evict, Outcome, Result
from upgrader.core.model.timefmt import parse_or_none, rfc3339
from upgrader.core.model.views import PdbView
from upgrader.core.report.document import RolloutStatus
from upgrader.core.report.entries import BackoffEntry

BASE_SECONDS = 10  # the pause after a budget's first refusal
CAP_SECONDS = 300  # the longest pause: a budget is asked at least this often


@dataclass(frozen=True)
class Pause:
    """One budget's backoff: how many refusals in a row, the `disruptionsAllowed` and `currentHealthy`
    they were made under, and when the next eviction it covers is sent."""

    refusals: int
    allowed: int
    retry_at: float
    healthy: int = -1

    def report(self) -> BackoffEntry:
        return BackoffEntry(self.refusals, self.allowed, rfc3339(self.retry_at), self.healthy)


def read(previous: RolloutStatus | None) -> dict[str, Pause]:
    """The backoff the last status kept; anything unreadable is no backoff (the eviction is sent)."""
    out: dict[str, Pause] = {}
    for key, entry in (previous.eviction_backoff or {}).items() if previous is not None else ():
        retry_at = parse_or_none(entry.retry_at)
        if retry_at is not None:
            out[key] = Pause(entry.refusals, entry.allowed, retry_at, entry.healthy)
    return out


def current(pauses: Mapping[str, Pause], pdbs: Sequence[PdbView]) -> dict[str, Pause]:
    """The pauses that still hold: a budget gone, or whose `disruptionsAllowed` or `currentHealthy`
    moved, is reset."""
    seen = {p.key: (p.disruptions_allowed, p.current_healthy) for p in pdbs}
    return {key: pause for key, pause in pauses.items() if seen.get(key) == (pause.allowed, pause.healthy)}


def hold(
    attempts: Sequence[Action], pdb_of: Mapping[str, PdbView], pauses: Mapping[str, Pause], now: float,
    disrupted: Collection[str] = (),
) -> tuple[list[Action], list[Outcome]]:
    """The attempts to send now, and the evictions held back, each as a refusal said in words: those
    of a budget in its backoff, and those past what a budget allows in this pass (its snapshot's
    disruptionsAllowed, less one for a budget another node evicted under already, `disrupted`, and one
    for each eviction of it sent before in this batch), or of a budget a disruption in progress
    spends down to 0: the API server would refuse them, 429. A budget at full health that allows
    nothing still gets its eviction: its refusal is the block the rollout halts on and reports."""
    send: list[Action] = []
    held: list[Outcome] = []
    used: Counter[str] = Counter(disrupted)
    for action in attempts:
        pdb = pdb_of.get(f"{action.namespace}/{action.name}") if isinstance(action, Evict) else None
        pause = pauses.get(pdb.key) if pdb is not None else None
        recovering = pdb is not None and pdb.current_healthy < pdb.expected_pods
        if pdb is not None and (used[pdb.key] or recovering) and used[pdb.key] >= pdb.disruptions_allowed:
            why = (f"this pass evicts {used[pdb.key]} pod(s) under it already" if used[pdb.key] else
                   f"a disruption is in progress (currentHealthy {pdb.current_healthy} of {pdb.expected_pods})")
            said = f"not sent: PodDisruptionBudget {pdb.key} allows {pdb.disruptions_allowed} disruption(s) and {why}"
            held.append(Outcome(action, Result.BLOCKED, said))
            continue
        if pdb is None or pause is None or now >= pause.retry_at:
            send.append(action)
            if pdb is not None:
                used[pdb.key] += 1
            continue
        said = (
            f"not sent: PodDisruptionBudget {pdb.key} refused {pause.refusals} in a row at disruptionsAllowed="
            f"{pause.allowed}; next try at {rfc3339(pause.retry_at)} or when disruptionsAllowed changes"
        )
        held.append(Outcome(action, Result.BLOCKED, said))
    return send, held


def after(
    pauses: Mapping[str, Pause], pdb_of: Mapping[str, PdbView], sent: Sequence[Outcome], now: float,
    counted: set[str], disrupted: Collection[str] = (),
) -> dict[str, Pause]:
    """The pauses once the evictions `sent` were answered: a 429 doubles its budget's pause (once a
    pass, `counted` holding the budgets already counted), an eviction admitted ends it. A refusal by
    a budget this pass spent itself (`disrupted`: it evicted under it on another node, so what the
    snapshot says of the budget is already old) is tried again at the next pass."""
    out = dict(pauses)
    for outcome in sent:
        action = outcome.action
        pdb = pdb_of.get(f"{action.namespace}/{action.name}") if isinstance(action, Evict) else None
        if pdb is None:
            continue
        if outcome.result is Result.OK:
            out.pop(pdb.key, None)
        elif outcome.result is Result.BLOCKED and pdb.key not in counted and pdb.key not in disrupted:
            counted.add(pdb.key)
            before = pauses.get(pdb.key)
            refusals = (before.refusals if before else 0) + 1
            delay = min(CAP_SECONDS, BASE_SECONDS * 2 ** (refusals - 1))
            out[pdb.key] = Pause(refusals, pdb.disruptions_allowed, now + delay, pdb.current_healthy)
    return out


def to_status(pauses: Mapping[str, Pause]) -> dict[str, BackoffEntry]:
    return {key: pauses[key].report() for key in sorted(pauses)}
