"""The per-node state machine: one `transitions` Machine, an explicit table, no auto transitions.

A trigger fires only along the table; its callback appends a `Transition` action (the label write)
to the model and does nothing else. Which trigger to fire, and when, is decided in `steps`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transitions import EventData, Machine, MachineError

from upgrader.core.actions import Transition
from upgrader.core.states import IN_PROGRESS, State

S = State
TRANSITIONS: list[dict[str, Any]] = [
    {"trigger": "require", "source": S.DONE, "dest": S.UPGRADE_REQUIRED},
    {"trigger": "up_to_date", "source": S.UPGRADE_REQUIRED, "dest": S.DONE},
    {"trigger": "start", "source": S.UPGRADE_REQUIRED, "dest": S.CORDON_REQUIRED},
    {"trigger": "cordoned", "source": S.CORDON_REQUIRED, "dest": S.WAIT_FOR_JOBS_REQUIRED},
    {"trigger": "jobs_finished", "source": S.WAIT_FOR_JOBS_REQUIRED, "dest": S.POD_DELETION_REQUIRED},
    {
        "trigger": "gpu_pods_gone",
        "source": S.POD_DELETION_REQUIRED,
        "dest": S.DRAIN_REQUIRED,
        "conditions": "drain_enabled",
    },
    {
        "trigger": "gpu_pods_gone",
        "source": S.POD_DELETION_REQUIRED,
        "dest": S.POD_RESTART_REQUIRED,
        "unless": "drain_enabled",
    },
    {"trigger": "drained", "source": S.DRAIN_REQUIRED, "dest": S.POD_RESTART_REQUIRED},
    {"trigger": "driver_restarted", "source": S.POD_RESTART_REQUIRED, "dest": S.VALIDATION_REQUIRED},
    {"trigger": "validated", "source": S.VALIDATION_REQUIRED, "dest": S.UNCORDON_REQUIRED},
    # A newer driver revision released while the node validates: the OnDelete DaemonSet will not
    # replace the pod on its own, so the node restarts the driver again rather than time out.
    {"trigger": "driver_superseded", "source": S.VALIDATION_REQUIRED, "dest": S.POD_RESTART_REQUIRED},
    {"trigger": "uncordoned", "source": S.UNCORDON_REQUIRED, "dest": S.DONE},
    {"trigger": "fail", "source": sorted(IN_PROGRESS, key=list(State).index), "dest": S.FAILED},
]
TRIGGERS = sorted({t["trigger"] for t in TRANSITIONS})


class NodeModel:
    """One node's state for the length of one decision; collects the Transition it produces."""

    def __init__(self, node: str, state: State, drain_enabled: bool) -> None:
        self.node = node
        self.state: State = state
        self._drain_enabled = drain_enabled
        self.actions: list[Transition] = []

    def drain_enabled(self, event: EventData) -> bool:
        return self._drain_enabled

    def record(self, event: EventData) -> None:
        assert event.transition is not None and event.transition.dest is not None
        self.actions.append(
            Transition(
                node=self.node,
                source=State[event.transition.source],
                target=State[event.transition.dest],
                annotations=dict(event.kwargs.get("annotations") or {}),
                message=str(event.kwargs.get("message", "")),
            )
        )


MACHINE = Machine(
    model=None,
    states=State,
    transitions=TRANSITIONS,
    initial=None,
    auto_transitions=False,
    send_event=True,
    after_state_change="record",
)


def fire(
    node: str,
    state: State,
    trigger: str,
    drain_enabled: bool = False,
    annotations: Mapping[str, str | None] | None = None,
    message: str = "",
) -> Transition:
    """Fire `trigger` from `state`; the resulting Transition, or MachineError off the table."""
    if trigger not in TRIGGERS:
        # transitions raises AttributeError for a name it has no event for (`to_upgrade_done`
        # included, as auto transitions are off); off the table is off the table.
        raise MachineError(f"{trigger!r} is not a trigger of the upgrade state machine")
    model = NodeModel(node, state, drain_enabled)
    MACHINE.add_model(model, initial=state)
    try:
        if not model.trigger(trigger, annotations=annotations or {}, message=message):  # type: ignore[attr-defined]
            raise MachineError(f"{trigger} from {state.value} was refused by its guard")
    finally:
        MACHINE.remove_model(model)
    return model.actions[-1]


def allowed_triggers(state: State) -> list[str]:
    return [t for t in TRIGGERS if MACHINE.get_transitions(trigger=t, source=state.name)]
