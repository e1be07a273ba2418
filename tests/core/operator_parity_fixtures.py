"""Helpers shared by the GPU Operator parity tests (test_operator_parity*.py): the state shorthand and
a start decided on one node."""

from __future__ import annotations

from typing import Any

from upgrader.core.model.actions import Transition
from upgrader.core.model.states import State
from upgrader.core.rollout.starts import start_nodes

from .factories import (
    OLD,
    T0,
    driver_pod,
    policy,
    snapshot,
    transition,
)

S = State


def _start(view: Any, pods: list[Any] | None = None, sets: list[Any] | None = None) -> Transition:
    snap = snapshot([view], pods or [driver_pod(revision=OLD)], driver_sets=sets)
    _, actions = start_nodes(snap, policy(maxUnavailable="100%"), T0, True, set())
    return transition(actions)
