"""Our record cannot outlive our cordon (docs/policy.md#the-cordon-records-lifetime): a node upgrader
cordoned, then uncordoned by a person while no one upgrades it (failed, or back at upgrade-required), and
cordoned by an admin later (a hardware repair), keeps the admin's cordon after its next upgrade, on each
path that brings it back: the runbooks' retry of a failed node, its recovery by itself, a person's relabel
with the skip label (runbooks/pdb-blocked-eviction.md), a relabel while the rollout is paused. Real
kubectl for the person and the admin; the controller over HTTP, a virtual second between passes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.shown import shown
from upgrader.commands.cli import main
from upgrader.core.model.states import OUR_CORDON, SKIP_LABEL, STATE_LABEL, State
from upgrader.sim.fleets.scenarios import DRIVER_REPO, NEW_DRIVER, UNBUILT_KERNEL, driver_tag

from .conftest import FAST_POLICY, Rollout

LIFTED = "upgrader's cordon was lifted while the node was"


def _passes(r: Rollout, ctl: Any, until: Callable[[dict[str, Any]], bool], timeout: float = 400.0) -> dict[str, Any]:
    deadline = r.now() + timeout
    status: dict[str, Any] = {}
    while r.now() < deadline:
        status = shown(r.step_pass(ctl).status) or status
        if until(status):
            return status
    raise AssertionError(f"not reached in {timeout:g} virtual s; last status: {status.get('message')}")


def _state(r: Rollout, node: str) -> str | None:
    return r.node(node)["metadata"]["labels"].get(STATE_LABEL)


def _failed(r: Rollout, ctl: Any) -> str:
    node = r.info.missing_image_node
    assert node is not None
    _passes(r, ctl, lambda _: _state(r, node) == State.FAILED.value)
    assert r.node(node)["spec"].get("unschedulable") and r.node(node)["metadata"]["annotations"][OUR_CORDON] == "true"
    return node


def _lift_then_repair(r: Rollout, ctl: Any, node: str) -> None:
    """A person uncordons the node (a pass sees it), then an admin cordons it for a repair."""
    r.kubectl("uncordon", node)
    for _ in range(3):
        r.step_pass(ctl)
    r.kubectl("cordon", node)


def _publish(r: Rollout) -> None:
    r.cluster.settings.registry[DRIVER_REPO].add(driver_tag(NEW_DRIVER, UNBUILT_KERNEL))


def _ends_with_the_admins_cordon(r: Rollout, ctl: Any, node: str) -> None:
    status = _passes(r, ctl, lambda s: s.get("phase") == "Done")
    assert _state(r, node) == State.DONE.value
    assert r.node(node)["spec"].get("unschedulable") is True, "the admin's cordon is still on"
    others = [n for n in r.info.nodes if n != node]
    assert not any(r.node(n)["spec"].get("unschedulable") for n in others), "upgrader's own cordons are lifted"
    assert status["nodes_by_state"][State.DONE.value] == len(r.info.nodes)
    assert any(e["message"].startswith(LIFTED) for e in r.events_for(node)), "and the Event says why"


POLICY = {**FAST_POLICY, "podRestart": {"timeoutSeconds": 60}}


def test_the_runbooks_retry_of_a_failed_node(rollout: Any) -> None:
    r: Rollout = rollout("missing-image", POLICY, virtual=True)
    ctl = r.controller()
    node = _failed(r, ctl)
    _lift_then_repair(r, ctl, node)
    _publish(r)
    r.kubectl("label", "node", node, f"{STATE_LABEL}={State.UPGRADE_REQUIRED.value}", "--overwrite")
    _ends_with_the_admins_cordon(r, ctl, node)


def test_a_failed_node_that_recovers_by_itself(rollout: Any) -> None:
    r: Rollout = rollout("missing-image", POLICY, virtual=True)
    ctl = r.controller()
    node = _failed(r, ctl)
    _lift_then_repair(r, ctl, node)
    _publish(r)  # the kubelet's retry brings the driver up: validated, and not uncordoned
    _ends_with_the_admins_cordon(r, ctl, node)
    warnings = [e["message"] for e in r.events_for(node) if e["type"] == "Warning"]
    assert not any("no record says" in w for w in warnings), "someone else's cordon: no block, no question"


@pytest.mark.parametrize("how", ["skip-label", "paused"])
def test_a_node_a_person_moved_back_to_upgrade_required(rollout: Any, how: str) -> None:
    r: Rollout = rollout("healthy", virtual=True)
    ctl = r.controller()
    _passes(r, ctl, lambda _: any(_state(r, n) == State.WAIT_FOR_JOBS_REQUIRED.value for n in r.info.nodes))
    node = next(n for n in r.info.nodes if _state(r, n) == State.WAIT_FOR_JOBS_REQUIRED.value)
    if how == "skip-label":  # runbooks/pdb-blocked-eviction.md, step 6, in its order
        r.kubectl("label", "node", node, f"{SKIP_LABEL}=true")
    else:
        assert main(["pause", "--kubeconfig", str(r.kubeconfig)]) == 0
    r.kubectl("label", "node", node, f"{STATE_LABEL}={State.UPGRADE_REQUIRED.value}", "--overwrite")
    _lift_then_repair(r, ctl, node)
    if how == "skip-label":
        r.kubectl("label", "node", node, f"{SKIP_LABEL}-")
    else:
        assert main(["resume", "--kubeconfig", str(r.kubeconfig)]) == 0
    _ends_with_the_admins_cordon(r, ctl, node)
