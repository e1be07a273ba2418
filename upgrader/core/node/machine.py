"""The per-node state machine: one `transitions` Machine, an explicit table, no auto transitions.

A trigger fires only along the table; its callback appends a `Transition` action (the label write)
to the model and does nothing else. Which trigger to fire, and when, is decided in `steps`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from transitions import EventData, Machine, MachineError

from upgrader.core.model.actions import Transition
from upgrader.core.model.states import IN_PROGRESS, State

S = State
# Guards name flags a node's decision carries (`fire(..., flags=...)`):
#   restart_only      the driver's install configuration is unchanged (DRIVER_CONFIG_DIGEST): cordon, then
#                     restart the driver under the running GPU pods, as the GPU Operator does
#   drain_every_node  upgrader's drainEveryNode: drain after GPU pod deletion even when it succeeded
#   drain_enabled     drain.enable: GPU pod deletion that cannot finish falls back to a drain
FLAGS = ("restart_only", "drain_every_node", "drain_enabled")
TRANSITIONS: list[dict[str, Any]] = [
    {"trigger": "require", "source": S.DONE, "dest": S.UPGRADE_REQUIRED},
    {"trigger": "up_to_date", "source": S.UPGRADE_REQUIRED, "dest": S.DONE},
    {"trigger": "start", "source": S.UPGRADE_REQUIRED, "dest": S.CORDON_REQUIRED},
    {"trigger": "cordoned", "source": S.CORDON_REQUIRED, "dest": S.WAIT_FOR_JOBS_REQUIRED, "unless": "restart_only"},
    {"trigger": "cordoned", "source": S.CORDON_REQUIRED, "dest": S.POD_RESTART_REQUIRED, "conditions": "restart_only"},
    {"trigger": "jobs_finished", "source": S.WAIT_FOR_JOBS_REQUIRED, "dest": S.POD_DELETION_REQUIRED},
    {
        "trigger": "gpu_pods_gone",
        "source": S.POD_DELETION_REQUIRED,
        "dest": S.POD_RESTART_REQUIRED,
        "unless": "drain_every_node",
    },
    {
        "trigger": "gpu_pods_gone",
        "source": S.POD_DELETION_REQUIRED,
        "dest": S.DRAIN_REQUIRED,
        "conditions": "drain_every_node",
    },
    # GPU pod deletion cannot finish (pods the policy may not delete, or past its timeout): drain.
    {
        "trigger": "deletion_failed",
        "source": S.POD_DELETION_REQUIRED,
        "dest": S.DRAIN_REQUIRED,
        "conditions": "drain_enabled",
    },
    {"trigger": "drained", "source": S.DRAIN_REQUIRED, "dest": S.POD_RESTART_REQUIRED},
    # A restart-only node whose driver configuration changed meanwhile: its GPU pods must go first.
    {"trigger": "config_changed", "source": S.POD_RESTART_REQUIRED, "dest": S.WAIT_FOR_JOBS_REQUIRED},
    {"trigger": "driver_restarted", "source": S.POD_RESTART_REQUIRED, "dest": S.VALIDATION_REQUIRED},
    {"trigger": "validated", "source": S.VALIDATION_REQUIRED, "dest": S.UNCORDON_REQUIRED},
    # A newer driver revision released while the node validates: the OnDelete DaemonSet will not
    # replace the pod on its own, so the node restarts the driver again rather than time out.
    {"trigger": "driver_superseded", "source": S.VALIDATION_REQUIRED, "dest": S.POD_RESTART_REQUIRED},
    {"trigger": "uncordoned", "source": S.UNCORDON_REQUIRED, "dest": S.DONE},
    {"trigger": "fail", "source": sorted(IN_PROGRESS, key=list(State).index), "dest": S.FAILED},
    # A failed node whose driver pod came up Ready at the newest revision since it failed: validate
    # it again (the GPU Operator uncordons it without validating).
    {"trigger": "driver_recovered", "source": S.FAILED, "dest": S.VALIDATION_REQUIRED},
    # upgrade-done set by hand on a node whose upgrade had not ended: validated, then uncordoned.
    {"trigger": "unfinished", "source": S.DONE, "dest": S.VALIDATION_REQUIRED},
    # Taken over before anything disrupted it (another controller put it there, not cordoned yet): it
    # waits for its turn under upgrader's budgets and domain order instead.
    {"trigger": "requeue", "source": [S.CORDON_REQUIRED, S.WAIT_FOR_JOBS_REQUIRED], "dest": S.UPGRADE_REQUIRED},
]
TRIGGERS = sorted({t["trigger"] for t in TRANSITIONS})


def edges() -> list[tuple[State, State]]:
    """Every (from, to) pair the table allows, in state order: the label writes a pass can make."""
    pairs = {
        (State(source), State(t["dest"]))
        for t in TRANSITIONS
        for source in (t["source"] if isinstance(t["source"], list) else [t["source"]])
    }
    order = list(State)
    return sorted(pairs, key=lambda p: (order.index(p[0]), order.index(p[1])))


class NodeModel:
    """One node's state for the length of one decision; collects the Transition it produces."""

    def __init__(self, node: str, state: State, flags: frozenset[str]) -> None:
        self.node = node
        self.state: State = state
        self._flags = flags
        self.actions: list[Transition] = []

    def restart_only(self, event: EventData) -> bool:
        return "restart_only" in self._flags

    def drain_every_node(self, event: EventData) -> bool:
        return "drain_every_node" in self._flags

    def drain_enabled(self, event: EventData) -> bool:
        return "drain_enabled" in self._flags

    def record(self, event: EventData) -> None:
        assert event.transition is not None and event.transition.dest is not None
        self.actions.append(
            Transition(
                node=self.node,
                source=State[event.transition.source],
                target=State[event.transition.dest],
                annotations=dict(event.kwargs.get("annotations") or {}),
                message=str(event.kwargs.get("message", "")),
                trigger=event.event.name,
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
    flags: Iterable[str] = (),
    annotations: Mapping[str, str | None] | None = None,
    message: str = "",
) -> Transition:
    """Fire `trigger` from `state` with the guards' `flags`; the Transition, or MachineError off the table."""
    unknown = set(flags) - set(FLAGS)
    if unknown:
        raise ValueError(f"unknown machine flags: {sorted(unknown)}")
    if trigger not in TRIGGERS:
        # transitions raises AttributeError for a name it has no event for (`to_upgrade_done`
        # included, as auto transitions are off); off the table is off the table.
        raise MachineError(f"{trigger!r} is not a trigger of the upgrade state machine")
    model = NodeModel(node, state, frozenset(flags))
    MACHINE.add_model(model, initial=state)
    try:
        if not model.trigger(trigger, annotations=annotations or {}, message=message):  # type: ignore[attr-defined]
            raise MachineError(f"{trigger} from {state.value} was refused by its guard")
    finally:
        MACHINE.remove_model(model)
    return model.actions[-1]


def allowed_triggers(state: State) -> list[str]:
    return [t for t in TRIGGERS if MACHINE.get_transitions(trigger=t, source=state.name)]
