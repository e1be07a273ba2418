"""The Normal Events a state change leaves on its node, as the GPU Operator leaves them.

The Operator records every change of the state label ("Successfully updated node state label to
..."), and a finished GPU pod deletion and drain; users grep for those words, so they are kept, with
what upgrader knows added after them. Warnings (blocks, failures, fallbacks) are decided where
they happen. When no node can start, one Event says why, each time the reason changes.
"""

from __future__ import annotations

from upgrader.core.model.actions import Event, Transition
from upgrader.core.report.document import LastStatus
from upgrader.core.rollout.waits import Wait

WAITING = "rollout waiting: "

# What finishing a step means, in the Operator's words, by the trigger that left it.
FINISHED = {
    "gpu_pods_gone": "Deleted workload pods on the node for the driver upgrade",
    "drained": "Successfully drained the node",
}


def transition_events(transition: Transition) -> list[Event]:
    """The Normal Events for a state change that landed."""
    target = transition.target.value
    source = transition.source.value if transition.source is not None else "(no state)"
    detail = transition.message if transition.message and transition.message != f"{source} -> {target}" else ""
    text = f"Successfully updated node state label to {target} (from {source})" + (f": {detail}" if detail else "")
    events = [Event(transition.node, "Normal", text)]
    finished = FINISHED.get(transition.trigger)
    if finished is not None:
        events.insert(0, Event(transition.node, "Normal", finished))
    return events


def waiting_line(text: str) -> str:
    """The Event's words, and the controller's log line, for a wait the status message states."""
    return WAITING + text


def waiting_events(wait: Wait | None, previous: LastStatus | None) -> list[Event]:
    """One Event when the rollout starts waiting on something other than the last status said (judged
    by `waiting_on`, which stays the same from pass to pass while the wait does), on the first node
    behind the wait, else on the node that starts next. A Warning when only a person ends it."""
    if wait is None or (previous is not None and wait.report() == previous.waiting_on):
        return []
    node = wait.nodes[0].node if wait.nodes else wait.next
    if node is None:
        return []
    return [Event(node, "Warning" if wait.runbook else "Normal", waiting_line(wait.text))]
