"""Whose cordon is on a node, and upgrader's own: the cordon and its record in one request, the uncordon
only where the record says it is ours, the cordon put back in progress, and the record's end once our
cordon is gone whatever took it off (docs/policy.md#the-cordon-records-lifetime)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from upgrader.core.model.actions import Action, Annotate, DeletePod, Event, SetUnschedulable
from upgrader.core.model.states import (
    IN_PROGRESS,
    OPERATOR_INITIAL_UNSCHEDULABLE,
    OUR_CORDON,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.model.views import NodeView
from upgrader.core.node.context import NodeContext
from upgrader.core.node.step import Blocked, Step
from upgrader.core.report.kinds import BlockKind

# Upgrader's cordon and its record, written in one request guarded by the node's resourceVersion.
OURS: Mapping[str, str | None] = {WAS_UNSCHEDULABLE: "false", OPERATOR_INITIAL_UNSCHEDULABLE: None, OUR_CORDON: "true"}


def cordon(ctx: NodeContext) -> Step:
    """Cordon, the record in the same request (whoever had cordoned it before the start uncordoned it
    since: this cordon is ours). A node cordoned since the start said it was not, without our mark,
    was cordoned by someone else in between: that cordon is theirs, and stays after the upgrade."""
    step = Step(ctx.node.name, trigger="cordoned")
    node = ctx.node
    if not node.unschedulable:
        step.attempts.append(SetUnschedulable(node.name, True, OURS))
    elif node.annotations.get(WAS_UNSCHEDULABLE) == "false" and node.annotations.get(OUR_CORDON) != "true":
        step.attempts.append(Annotate(node.name, {WAS_UNSCHEDULABLE: "true", OPERATOR_INITIAL_UNSCHEDULABLE: "true"}))
        said = "cordoned by someone else after its upgrade started, before upgrader's cordon: it stays cordoned after"
        step.attempts.append(Event(node.name, "Warning", said + " the upgrade"))
    return step


def uncordon(ctx: NodeContext) -> Step:
    """Lift the cordon only where a record positively says it is upgrader's: a missing or unreadable
    record keeps the node cordoned, and says so (a block: someone must decide)."""
    step = Step(ctx.node.name, trigger="uncordoned")
    annotations = ctx.node.annotations
    record = annotations.get(WAS_UNSCHEDULABLE)
    # Ours, or the GPU Operator's record on a node taken over from it (present: not its cordon).
    cordoned_by_someone_else = record == "true" or OPERATOR_INITIAL_UNSCHEDULABLE in annotations
    if not ctx.node.unschedulable or cordoned_by_someone_else:
        return step
    if record != "false":
        step.trigger = None
        shown = "missing" if record is None else f"{record!r}, not true or false"
        step.blocked = Blocked(
            BlockKind.CORDON_RECORD,
            f"no record says upgrader cordoned the node ({WAS_UNSCHEDULABLE} is {shown}), so it stays "
            f"cordoned: uncordon it yourself if upgrader cordoned it, or annotate {WAS_UNSCHEDULABLE}=false",
        )
        return step
    step.attempts.append(SetUnschedulable(ctx.node.name, False, {OUR_CORDON: None}))
    return step


def keep_cordoned(ctx: NodeContext, step: Step) -> Step:
    """Someone uncordoned a node between our cordon and our uncordon: cordon it again, ours, and say so."""
    if ctx.node.unschedulable or ctx.node.state not in KEPT_CORDONED:
        return step
    name, state = ctx.node.name, ctx.node.state.value
    # The record in the same request: our cordon is never recorded as someone else's, nor theirs as ours.
    # The driver is never deleted in that pass (the cordon may be refused as stale; pods may have landed
    # since they were listed): the restart waits for the next, cordoned, pass.
    cordon = SetUnschedulable(name, True, OURS)
    said = Event(name, "Warning", f"cordoned again: someone uncordoned the node in {state}, before its upgrade ended")
    kept = [a for a in step.attempts if not isinstance(a, DeletePod)]
    if len(kept) == len(step.attempts):
        return replace(step, attempts=[cordon, said, *kept])
    return replace(step, attempts=[cordon, said, *kept], trigger=None, stamp_on_success=None)


# States between upgrader's cordon and its uncordon: the node must stay cordoned.
KEPT_CORDONED = frozenset(
    {
        State.WAIT_FOR_JOBS_REQUIRED,
        State.POD_DELETION_REQUIRED,
        State.DRAIN_REQUIRED,
        State.POD_RESTART_REQUIRED,
        State.VALIDATION_REQUIRED,
    }
)


def cordon_record(node: NodeView) -> tuple[str | None, str]:
    """Who cordoned a node upgrader takes up mid-way, only as far as a record says: the Operator's mark
    of someone else's cordon, a record of ours (set by a person after the runbook), or no cordon at
    all. A cordon nothing accounts for is left unrecorded: it stays on at the end, and the uncordon
    step says so. Returns the record to write and the sentence that says it."""
    record = node.annotations.get(WAS_UNSCHEDULABLE)
    if record == "true" or OPERATOR_INITIAL_UNSCHEDULABLE in node.annotations:
        return "true", f"{OPERATOR_INITIAL_UNSCHEDULABLE} says someone else cordoned it: it stays cordoned at the end"
    if record == "false" or not node.unschedulable:
        return "false", "it is uncordoned at the end"
    return None, (
        f"no record says who cordoned it: it stays cordoned at the end unless {WAS_UNSCHEDULABLE}=false "
        "is set (the GPU Operator's own cordon)"
    )


def record_outlived(node: NodeView) -> bool:
    """Whether a node no one is upgrading is schedulable with upgrader's record of a cordon of its own on it:
    that cordon is gone (a person uncordoned the node, whatever state it was in), so the record must go."""
    ours = node.annotations.get(OUR_CORDON) == "true" or node.annotations.get(WAS_UNSCHEDULABLE) == "false"
    return ours and not node.unschedulable and node.state not in IN_PROGRESS


def forget_lifted_cordon(node: NodeView) -> list[Action]:
    """The record of a cordon of ours that is gone turned round: any cordon on the node from now on is
    someone else's (a repair), so it is never lifted as ours at the node's next upgrade, whatever brought
    the node back to upgrade-required (a retry, its recovery, a relabel, a pause). A start on the node
    uncordoned writes a record of its own; a node in progress is cordoned again instead (`keep_cordoned`)."""
    if not record_outlived(node):
        return []
    said = (
        f"upgrader's cordon was lifted while the node was {node.state.value if node.state else 'unlabelled'}: any "
        "cordon put on from now on is someone else's and stays after the node's upgrade"
    )
    return [Annotate(node.name, {OUR_CORDON: None, WAS_UNSCHEDULABLE: "true"}), Event(node.name, "Normal", said)]
