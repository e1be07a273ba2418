"""The world model behaves like the Kubernetes API the controller talks to (what the properties rely on)."""

from __future__ import annotations

from upgrader.core.model.actions import DeletePod, Evict, Result, SetUnschedulable, Transition
from upgrader.core.model.states import STATE_LABEL, State

from .world import World
from .world_objects import DRIVER, WORKLOAD, FleetSpec, NodeSpec, WorkloadSpec


def two_nodes_one_budget(min_available: int) -> World:
    """web-0 has one replica on each node, under a budget of `min_available`."""
    return World(
        FleetSpec((NodeSpec(zone="a"), NodeSpec(zone="a")), (WorkloadSpec((0, 1), min_available=min_available),))
    )


def replicas(world: World) -> list[Evict]:
    pods = [p for p in world.pods.values() if p.kind == WORKLOAD]
    return [Evict(p.node, p.namespace, p.name, p.uid) for p in pods]


def test_evictions_in_one_pass_see_the_disruption_the_previous_one_used() -> None:
    world = two_nodes_one_budget(min_available=1)
    first, second = replicas(world)
    assert world.apply(first).result is Result.OK
    assert world.apply(second).result is Result.BLOCKED  # the budget is spent: 429, the pod stays
    assert world.pods[second.uid].active
    assert world.pods[first.uid].terminating
    assert second.uid in world.refused


def test_a_budget_with_room_lets_each_replica_go() -> None:
    world = two_nodes_one_budget(min_available=0)
    assert [world.apply(e).result for e in replicas(world)] == [Result.OK, Result.OK]


def test_a_terminating_pod_evicts_without_asking_the_budget() -> None:
    world = two_nodes_one_budget(min_available=2)
    first, _ = replicas(world)
    world.pods[first.uid].terminating = True
    assert world.apply(first).result is Result.OK


def test_cordon_keeps_pods_and_scheduling_skips_the_node() -> None:
    world = two_nodes_one_budget(min_available=1)
    before = {p.uid for p in world.pods_on("node-0")}
    assert world.apply(SetUnschedulable("node-0", True)).result is Result.OK
    assert {p.uid for p in world.pods_on("node-0")} == before
    assert "node-0" not in world.schedulable(gpus=1)


def test_label_writes_are_compare_and_swap() -> None:
    world = World(FleetSpec((NodeSpec(),)))
    assert world.apply(Transition("node-0", None, State.UPGRADE_REQUIRED)).result is Result.OK
    stale = Transition("node-0", None, State.DONE)
    assert world.apply(stale).result is Result.CONFLICT
    assert world.nodes["node-0"].labels[STATE_LABEL] == State.UPGRADE_REQUIRED.value


def test_deletes_are_guarded_by_uid_and_a_deleted_driver_comes_back_at_the_newest_revision() -> None:
    world = World(FleetSpec((NodeSpec(),)))
    (driver,) = world.driver_pods_on("node-0")
    assert world.apply(DeletePod("node-0", driver.namespace, driver.name, "another-uid")).result is Result.GONE
    assert world.apply(DeletePod("node-0", driver.namespace, driver.name, driver.uid)).result is Result.OK
    assert world.nodes["node-0"].gpu_allocatable == "0"
    world.disappear(driver.uid)
    (created,) = (world.create_driver(n) for n in world.nodes_missing_driver())
    assert created.kind == DRIVER and created.labels["controller-revision-hash"] == world.newest
    world.driver_ready(created.uid)
    assert world.nodes["node-0"].gpu_allocatable == "8"


def test_a_missing_image_keeps_the_new_driver_pod_from_turning_ready() -> None:
    world = World(FleetSpec((NodeSpec(image_broken=True),)))
    (old,) = world.driver_pods_on("node-0")
    world.disappear(old.uid)
    created = world.create_driver("node-0")
    assert created.waiting_reason == "ImagePullBackOff"
    assert world.starting_drivers() == []
    world.fix_image("node-0")
    assert world.starting_drivers() == [created]
