"""The Normal Events a state change leaves on its node, as the GPU Operator leaves them.

The Operator records every change of the state label ("Successfully updated node state label to
..."), and a finished GPU pod deletion and drain; users grep for those words, so they are kept, with
what upgrader knows added after them. Warnings (blocks, failures, fallbacks) are decided where
they happen.
"""

from __future__ import annotations

from upgrader.core.actions import Event, Transition

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
