"""Pools side by side in one status (policy `pools`, docs/policy.md#pools): a pool's entry made of its
own status, the whole's status made of the fleet-wide one and the pools' entries, and a pool's last
entry read back. Which node is in which pool is core/fleet/pool_shares.py's."""

from __future__ import annotations

from dataclasses import replace

from upgrader.core.report.document import PoolStatus, RolloutStatus
from upgrader.core.report.entries import Budget
from upgrader.core.report.kinds import Phase


def pool_entry(name: str, selects: str, status: RolloutStatus) -> PoolStatus:
    """A pool's entry in the whole's status: its name, what selects it, and its own figures."""
    return PoolStatus(
        name, selects, status.phase, status.message, status.halt_reason, status.waiting_on,
        status.waiting_since, status.nodes_total, status.nodes_by_state, status.current_domain,
        status.next_domain, status.domains, status.eta, status.budget, status.maintenance_window,
    )


def combined(whole: RolloutStatus, pools: list[PoolStatus], halt_across_pools: bool) -> RolloutStatus:
    """The whole rollout's status from the fleet-wide one (counts, lists of nodes) and the pools'
    entries: Halted when a pool is, Done when every pool is, what each pool waits on in its message."""
    phase, halt_reason, message = whole.phase, whole.halt_reason, whole.message
    halted = [p for p in pools if p.phase is Phase.HALTED]
    running = [p for p in pools if p.phase is Phase.RUNNING]
    if whole.phase is not Phase.PAUSED:
        if halted:
            first = halted[0]
            phase, halt_reason = Phase.HALTED, f"pool {first.name}: {first.halt_reason}"
            goes_on = "" if halt_across_pools or not running else (
                f"; {_names(running)} {'goes' if len(running) == 1 else 'go'} on (haltAcrossPools is false)"
            )
            message = f"halted: {halt_reason}{goes_on}"
        elif running:
            phase = Phase.RUNNING
            message = "; ".join(f"pool {p.name}: {p.message}" for p in running)
    waiting = next((p for p in running if p.waiting_on), None)
    etas = [p.eta for p in pools if p.eta]
    return replace(
        whole,
        phase=phase,
        message=message,
        halt_reason=halt_reason,
        pools=tuple(pools),
        waiting_on=waiting.waiting_on if waiting else None,
        waiting_since=waiting.waiting_since if waiting else None,
        current_domain=None,  # each pool has its own: pools[].current_domain
        next_domain=None,
        domains=tuple(replace(d, canary=False) for d in whole.domains),  # by zone across pools; canaries are theirs
        eta=max(etas, key=lambda e: e.at) if etas else None,
        budget=Budget(
            in_progress=sum(p.budget.in_progress for p in pools),
            max_parallel_upgrades=None,
            unavailable=sum(p.budget.unavailable or 0 for p in pools),
            max_unavailable=None,  # each pool's: pools[].budget
        ),
    )


def _names(pools: list[PoolStatus]) -> str:
    names = [p.name for p in pools]
    return ("pool " if len(names) == 1 else "pools ") + ", ".join(names)
