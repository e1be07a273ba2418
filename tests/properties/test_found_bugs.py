"""Deterministic reproductions of core bugs the property searches found, kept as regression tests.

- nodes_by_state left out nodes without a state label, so with autoUpgrade: false it summed to 0
  (upgrader/core/rollout/status.py; now counted under "unlabelled").
- a newer driver revision released while a node was in validation-required was waited for until
  validation.timeoutSeconds failed the node (upgrader/core/node/steps.py validate; now the node goes back
  to pod-restart-required).
"""

from __future__ import annotations

from upgrader.core.model.states import FAILED_REASON, UNLABELLED, State
from upgrader.core.policy.policy import policy_from_mapping

from .invariants import check_pass, check_state, open_violations
from .invariants_audit import Audit
from .rollout_support import settle
from .world import World, controller_pass
from .world_objects import NEWER_HASH, FleetSpec, NodeSpec


def test_status_counts_every_managed_node_by_state_when_auto_upgrade_is_off() -> None:
    world = World(FleetSpec((NodeSpec(zone="a"), NodeSpec(zone="a", current=True))))
    status = controller_pass(world, policy_from_mapping({"autoUpgrade": False})).status
    assert status.phase == "Paused"
    assert sum(status.nodes_by_state.values()) == status.nodes_total == 2
    assert status.nodes_by_state[UNLABELLED] == 2


def test_newer_driver_during_validation_restarts_the_driver() -> None:
    world = World(FleetSpec((NodeSpec(zone="a"),)))
    policy = policy_from_mapping({"validation": {"timeoutSeconds": 60}})
    audit = Audit(policy)
    world.auditors.append(audit)
    node = world.nodes["node-0"]
    for _ in range(20):  # the cluster keeps up: the node walks to validation-required
        controller_pass(world, policy)
        if node.state is State.VALIDATION_REQUIRED:
            break
        settle(world)
        world.advance(10)
    assert node.state is State.VALIDATION_REQUIRED
    world.new_driver_revision()  # released while the node validates rev-new
    for _ in range(30):
        result = controller_pass(world, policy)
        broken = open_violations(audit.violations + check_pass(world, policy, result) + check_state(world, policy))
        assert not broken, "\n".join(broken)
        settle(world)
        world.advance(10)
    assert node.state is State.DONE, node.annotations.get(FAILED_REASON)
    assert [p.labels["controller-revision-hash"] for p in world.driver_pods_on("node-0")] == [NEWER_HASH]
    assert not node.unschedulable
