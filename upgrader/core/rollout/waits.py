"""Why no node starts, in words: the reason, the nodes behind it, and what ends the wait.

`schedule.plan_starts` decides that nothing starts; this says why, once, for the status message, its
`waiting_on` field, an Event and the controller's log. A wait only a person can end (a budget held
by cordons, NotReady, failed or invalid nodes, or maxUnavailable 0) says what to undo and names the
runbook; one that ends by itself (nodes in progress, a soak) just says what it waits for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from upgrader.core.fleet.preflight import Hold
from upgrader.core.model.states import HELD_KIND, IN_PROGRESS, SKIP_LABEL, WAS_UNSCHEDULABLE, State
from upgrader.core.model.timefmt import rfc3339
from upgrader.core.model.views import NodeView
from upgrader.core.policy.alert_gate import GateVerdict, closed_text
from upgrader.core.policy.windows import YEARS, Verdict
from upgrader.core.report.entries import WaitingOn, WaitNode
from upgrader.core.report.kinds import WaitReason, hold_runbook

NAMED = 10  # nodes a sentence names before "and N more"
FIX_NAMED = 5  # nodes a remedy names before "and N more"
LISTED = 100  # nodes `waiting_on` lists: the status ConfigMap stays small on a large fleet

# What a person does about a node holding the budget, in the order a remedy lists them.
UNCORDON = "uncordon {}"
READY = "bring {} back to Ready"
RECOVER = "recover {}"
REPAIR = "fix what makes {} invalid"
RESOLVE = "resolve what holds {}"


@dataclass(frozen=True)
class Behind:
    """A node the wait is about, and why it counts."""

    node: str
    why: str
    fixes: tuple[str, ...] = field(default=(), compare=False)  # what a person does about it; none: it ends by itself


@dataclass(frozen=True)
class Wait:
    reason: WaitReason
    text: str  # the whole sentence: status message, Event and log line
    domain: str | None  # the domain the rollout is on
    nodes: tuple[Behind, ...] = ()
    next: str | None = None  # the node that starts first once the wait ends
    until: str | None = None  # when it ends by the clock (a soak), RFC 3339
    runbook: str | None = None  # set when only a person ends it
    alerts: tuple[str, ...] = ()  # alert-firing: the matching alerts, so a change of them is a new wait
    stage: tuple[str, str] | None = None  # a soak or a promotion wait: the stage and its finish, to promote

    def report(self) -> WaitingOn:
        """The status's `waiting_on`; nothing in it changes from pass to pass while the wait is the same."""
        stage, finished_at = self.stage or (None, None)
        return WaitingOn(
            self.reason, self.domain, tuple(WaitNode(b.node, b.why) for b in self.nodes[:LISTED]), len(self.nodes),
            self.next, self.until, self.runbook, self.alerts, stage, finished_at,
        )


def behind(node: NodeView, bystander: bool = False) -> Behind:
    """Why `node` counts as unavailable (see `schedule.is_unavailable`) and what would free it.

    Upgrader lifts its own cordon when a node finishes and clears its record then, so a finished node
    that is cordoned, or one with no record, was cordoned by someone else.
    """
    parts: list[str] = []
    fixes: list[str] = []
    invalid = bystander and node.labels.get(SKIP_LABEL) != "true"
    if bystander:
        parts.append("invalid" if invalid else "skipped")
    if invalid:
        fixes.append(REPAIR)  # whatever else holds it, the rollout cannot read it: fix that first
    if node.state in IN_PROGRESS:
        parts.append("in progress")
    elif node.state is State.FAILED:
        parts.append("upgrade-failed")
        fixes.append(RECOVER)
    elif node.unschedulable:
        ours = node.annotations.get(WAS_UNSCHEDULABLE) == "false"
        parts.append("cordoned by upgrader" if ours else "cordoned, not by upgrader")
        if not invalid:  # an unreadable node upgrader cordoned is mid-upgrade: its label needs fixing
            fixes.append(UNCORDON)
    if not node.ready:
        parts.append("NotReady")
        fixes.append(READY)
    return Behind(node.name, ", ".join(parts), tuple(f for f in (UNCORDON, READY, RECOVER, REPAIR) if f in fixes))


def max_parallel(limit: int, in_progress: Sequence[NodeView], domain: str | None, next_: str | None) -> Wait:
    nodes = tuple(behind(n) for n in sorted(in_progress, key=lambda n: n.name))
    return Wait(
        WaitReason.MAX_PARALLEL_UPGRADES, f"maxParallelUpgrades {limit} reached: {listing(nodes)}", domain, nodes, next_
    )


def max_unavailable(
    limit: int, holders: Sequence[Behind], domain: str | None, next_: str | None
) -> Wait:
    """The budget is full. Nodes a person can free come first; with none, it ends as nodes finish."""
    nodes = tuple(sorted(holders, key=lambda b: (not b.fixes, b.node)))
    text = f"maxUnavailable {limit} reached: {listing(nodes)}"
    steps = remedy(nodes)
    if not steps:
        return Wait(WaitReason.MAX_UNAVAILABLE, text, domain, nodes, next_)
    todo = f"{steps[0]} or" if len(steps) == 1 else f"{', '.join(steps[:-1])} and {steps[-1]}, or"
    reason = WaitReason.MAX_UNAVAILABLE
    return Wait(reason, f"{text}; {todo} raise maxUnavailable; see {reason.runbook}", domain, nodes, next_,
                runbook=reason.runbook)


def max_unavailable_zero(limit: int, waiting: Sequence[str], domain: str | None) -> Wait:
    """maxUnavailable 0: the candidates are available, so none ever starts (the Operator's rule)."""
    one = len(waiting) == 1
    text = (
        f"maxUnavailable {limit}: only nodes already unavailable (cordoned or NotReady) start; "
        f"{names(waiting, NAMED)} {'is' if one else 'are'} available and {'waits' if one else 'wait'}; "
        f"raise maxUnavailable; see {WaitReason.MAX_UNAVAILABLE_ZERO.runbook}"
    )
    nodes = tuple(Behind(n, "available") for n in waiting)
    reason = WaitReason.MAX_UNAVAILABLE_ZERO
    return Wait(reason, text, domain, nodes, waiting[0] if waiting else None, runbook=reason.runbook)


def soak(
    what: str, left: int, until: str, seconds: int, domain: str | None, next_: str | None, then: str,
    stage: tuple[str, str] | None = None,
) -> Wait:
    """A finished stage (`what`: a domain, or the canary domain's first nodes) soaks; `upgrader
    promote` ends it early (`stage`: its name and finish, core/rollout/stages.py)."""
    text = f"soaking {what} for {left}s more (failureDomains.soakSeconds {seconds}, until {until}); then {then} starts"
    return Wait(WaitReason.SOAK, text, domain, (), next_, until, stage=stage)


def awaiting_promotion(what: str, stage: str, finished_at: str, then: str, domain: str | None,
                       next_: str | None) -> Wait:
    """promotionGate: a finished stage waits for a person's promotion before the next starts."""
    text = (
        f"awaiting promotion: {what} finished at {finished_at} (promotionGate); {then} starts once promoted: "
        f"upgrader promote; see {WaitReason.AWAITING_PROMOTION.runbook}"
    )
    reason = WaitReason.AWAITING_PROMOTION
    return Wait(reason, text, domain, (), next_, runbook=reason.runbook, stage=(stage, finished_at))


def canary_nodes(domain: str, unfinished: Sequence[NodeView], count: int, rest: int, next_: str | None) -> Wait:
    """The canary domain's first nodes (failureDomains.canaryNodes) are not all finished: the rest
    of the domain waits; it ends by itself as they finish (a failure halts the rollout instead)."""
    nodes = tuple(_unfinished(n) for n in sorted(unfinished, key=lambda n: n.name))
    text = (
        f"the rest of the canary domain {domain} ({rest} nodes) waits for its first {count} "
        f"(failureDomains.canaryNodes) to finish: {listing(nodes)}"
    )
    return Wait(WaitReason.CANARY_NODES, text, domain, nodes, next_)


def window_closed(verdict: Verdict, domain: str | None, next_: str | None) -> Wait:
    """No maintenance window is open: nothing starts until the next opens; nodes in progress go on."""
    if verdict.next_open is None:  # the policy loaded, so its schedules fire; but not within sight now
        text = (
            f"no maintenance window is open and none opens within {YEARS} years; "
            f"fix maintenanceWindows in the policy; see {WaitReason.MAINTENANCE_WINDOW.runbook}"
        )
        return Wait(WaitReason.MAINTENANCE_WINDOW, text, domain, (), next_,
                    runbook=WaitReason.MAINTENANCE_WINDOW.runbook)
    until = rfc3339(verdict.next_open)
    text = (
        f"no maintenance window is open: the next, {verdict.about}, opens at {until} "
        f"({verdict.local(verdict.next_open)}); nodes in progress finish, none starts before"
    )
    return Wait(WaitReason.MAINTENANCE_WINDOW, text, domain, (), next_, until)


def gpu_capacity(held: Sequence[tuple[str, str]], domain: str | None) -> Wait:
    """Every node that could start would leave evicted GPU pods without room (onInsufficient: wait):
    the first one's shortage in full, the others named; it ends when room appears."""
    nodes = tuple(Behind(node, "evicted GPU pods would find no room") for node, _ in held)
    first, why = held[0]
    others = f"; also held: {names([n for n, _ in held[1:]], NAMED)}" if len(held) > 1 else ""
    text = (
        f"{first} is held at upgrade-required: {why}{others}; it starts when room appears "
        f"(gpuCapacity.onInsufficient: wait); see {WaitReason.INSUFFICIENT_GPU_CAPACITY.runbook}"
    )
    return Wait(WaitReason.INSUFFICIENT_GPU_CAPACITY, text, domain, nodes, first,
                runbook=WaitReason.INSUFFICIENT_GPU_CAPACITY.runbook)


def pdb_capacity(held: Sequence[tuple[str, str]], domain: str | None) -> Wait:
    """Every node that could start sits behind a budget the nodes in progress use up: it ends by
    itself as they finish evicting (or halts, naming the budget, if one never allows anything)."""
    nodes = tuple(Behind(node, "waits for its PodDisruptionBudget") for node, _ in held)
    first, why = held[0]
    others = f"; also waiting: {names([n for n, _ in held[1:]], NAMED)}" if len(held) > 1 else ""
    text = f"{first} waits at upgrade-required: {why}{others}; it starts when the budget frees"
    return Wait(WaitReason.PDB_CAPACITY, text, domain, nodes, first)


def preflight_hold(kept: Sequence[tuple[str, Hold]], domain: str | None) -> Wait:
    """Every node that could start has a blocking preflight finding: the first one's in full, the
    others named; it ends when what it lacks is there (an image pushed, a profile qualified)."""
    nodes = tuple(Behind(node, f"held: {h.kind}", (RESOLVE,)) for node, h in kept)
    first, hold = kept[0]
    others = f"; also held: {names([n for n, _ in kept[1:]], NAMED)}" if len(kept) > 1 else ""
    text = f"{first} is held at upgrade-required ({hold.kind}): {hold.reason}{others}; see {hold.runbook}"
    return Wait(WaitReason.PREFLIGHT_HOLD, text, domain, nodes, first, runbook=hold.runbook)


def alert_gate(verdict: GateVerdict, domain: str | None, next_: str | None) -> Wait:
    """A matching alert fires, or Prometheus cannot say: nothing starts; nodes in progress go on."""
    reason = verdict.reason or WaitReason.ALERT_GATE_UNAVAILABLE
    return Wait(reason, closed_text(verdict), domain, (), next_, runbook=reason.runbook, alerts=verdict.alerts)


def previous_domain(
    current: str, canary: bool, unfinished: Sequence[NodeView], waiting: str, next_: str | None
) -> Wait:
    """Nothing left to start in the domain the rollout is on; the next domain waits for it to finish."""
    nodes = tuple(_unfinished(n) for n in sorted(unfinished, key=lambda n: n.name))
    which = f"the canary domain {current}" if canary else f"domain {current}"
    text = f"domain {waiting} waits for {which} to finish: {listing(nodes)}"
    held = [n for n in unfinished if n.state is State.UPGRADE_REQUIRED and n.annotations.get(HELD_KIND)]
    if not held or any(n.state in IN_PROGRESS for n in unfinished):
        return Wait(WaitReason.PREVIOUS_DOMAIN, text, current, nodes, next_)
    # Only held nodes keep it from finishing: a person ends this wait.
    book = hold_runbook(held[0].annotations[HELD_KIND])
    text = f"{text}; {' and '.join(remedy(nodes))}; see {book}"
    return Wait(WaitReason.PREVIOUS_DOMAIN, text, current, nodes, next_, runbook=book)


def other_domain(elsewhere: Sequence[str], current: str, in_progress: Sequence[NodeView], next_: str | None) -> Wait:
    """Nodes of another domain are in progress (the order, a zone label or the fleet changed)."""
    nodes = tuple(behind(n) for n in sorted(in_progress, key=lambda n: n.name))
    text = (
        f"nodes of domain {', '.join(elsewhere)} are in progress while the rollout is on domain {current} "
        "(the order, a zone label or the fleet changed mid-rollout): no node starts until they finish; "
        f"in progress: {names([b.node for b in nodes], NAMED)}"
    )
    return Wait(WaitReason.OTHER_DOMAIN, text, current, nodes, next_)


def _unfinished(node: NodeView) -> Behind:
    if node.state is None:
        return Behind(node.name, "not labelled yet")
    if node.state is State.FAILED:
        return Behind(node.name, "upgrade-failed, not acknowledged", (RECOVER,))
    if node.state is State.UPGRADE_REQUIRED and node.annotations.get(HELD_KIND):
        return Behind(node.name, f"held at upgrade-required: {node.annotations[HELD_KIND]}", (RESOLVE,))
    return behind(node)


def listing(nodes: Sequence[Behind]) -> str:
    """`a (why), b (why)`, the first NAMED of them."""
    shown = ", ".join(f"{b.node} ({b.why})" for b in nodes[:NAMED])
    return shown + (f", and {len(nodes) - NAMED} more" if len(nodes) > NAMED else "")


def names(items: Sequence[str], limit: int) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def remedy(nodes: Sequence[Behind]) -> list[str]:
    """What a person does, per kind of fix: `uncordon them` when it is the same for every node named,
    else the nodes by name. None when every node ends by itself (in progress)."""
    steps = []
    for fix in (UNCORDON, READY, RECOVER, REPAIR, RESOLVE):
        which = [b.node for b in nodes if fix in b.fixes]
        if which:
            whom = names(which, FIX_NAMED) if len(which) < len(nodes) else "it" if len(which) == 1 else "them"
            steps.append(fix.format(whom))
    return steps
