"""No window for a cordon race (docs/policy.md#a-cordon-race): an admin's `kubectl cordon` (a hardware
repair) that lands after upgrader's start record and before its own cordon is the admin's, and the
node stays cordoned after its upgrade. Real kubectl; the controller through the official client over HTTP,
one pass at a time, a virtual second apart on the emulator's virtual clock, so the cordon lands exactly in
that window."""

from __future__ import annotations

from typing import Any

from tests.shown import shown
from upgrader.core.model.states import OUR_CORDON, STATE_LABEL, WAS_UNSCHEDULABLE, State

from .conftest import Rollout


def _passes_until(r: Rollout, ctl: Any, done: Any, timeout: float = 90.0) -> dict[str, Any]:
    """Passes until `done(status)`, a virtual second apart, for at most `timeout` virtual seconds."""
    deadline = r.now() + timeout
    status: dict[str, Any] = {}
    while r.now() < deadline:
        status = shown(ctl.reconcile().status)
        if done(status):
            return status
        r.cluster.advance(1)
    raise AssertionError(f"not reached; last status: {status.get('message')}")


def test_an_admin_cordon_in_the_window_before_upgraders_cordon_stays_after_the_upgrade(rollout: Any) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    ctl = r.controller()
    label = lambda n: r.node(n)["metadata"]["labels"].get(STATE_LABEL)  # noqa: E731
    _passes_until(r, ctl, lambda _: any(label(n) == State.CORDON_REQUIRED.value for n in r.info.nodes))
    node = next(n for n in r.info.nodes if label(n) == State.CORDON_REQUIRED.value)
    assert r.node(node)["metadata"]["annotations"][WAS_UNSCHEDULABLE] == "false"  # the start saw it schedulable
    assert not r.node(node)["spec"].get("unschedulable")
    r.kubectl("cordon", node)  # the admin, for a hardware repair, before upgrader's own cordon
    status = _passes_until(r, ctl, lambda s: s.get("phase") == "Done", timeout=120)
    assert r.node(node)["metadata"]["labels"][STATE_LABEL] == State.DONE.value
    assert r.node(node)["spec"].get("unschedulable") is True, "the admin's cordon is still on"
    others = [n for n in r.info.nodes if n != node]
    assert not any(r.node(n)["spec"].get("unschedulable") for n in others), "upgrader's own cordons are lifted"
    warnings = [e["message"] for e in r.events_for(node) if e["type"] == "Warning"]
    assert (
        "cordoned by someone else after its upgrade started, before upgrader's cordon: it stays cordoned after the "
        "upgrade" in warnings
    )
    assert OUR_CORDON not in r.node(node)["metadata"]["annotations"]
    assert status["nodes_by_state"][State.DONE.value] == len(r.info.nodes)
