"""gpuCapacity.onInsufficient in whole passes: under `wait` a node whose evicted GPU pods would find
no room is held at upgrade-required (another node starts instead while one can), the status names
the shortage and since when, and the node starts at the first pass with room; under `warn` (the
default) it starts with a Warning Event."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from upgrader.core.model.actions import Event
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.model.views import Control, PodView
from upgrader.core.report.entries import WaitNode
from upgrader.core.rollout.reconcile import PassOutcome, reconcile

from .factories import NEW, OLD, T0, at, driver_pod, node, pod, policy, snapshot, validator
from .test_rollout import World

S = State
GPU = "nvidia.com/gpu"
SHORT = (
    "1 evicted GPU pod(s) would stay Pending, no node they may run on having room: "
    "default/serve-0 (nvidia.com/gpu 4); free on available nodes: nvidia.com/gpu 2 (b 2); counted unavailable: none"
)
HELD = (
    f"a is held at upgrade-required: {SHORT}; it starts when room appears "
    "(gpuCapacity.onInsufficient: wait); see runbooks/insufficient-gpu-capacity.md"
)


def gpus(p: PodView, amount: int) -> PodView:
    return replace(p, gpus=amount, gpu_requests={GPU: amount})


def fleet(b: State = S.UPGRADE_REQUIRED) -> World:
    """a: a Deployment pod on 4 GPUs; b: a bare pod on 6 of its 8 GPUs (nothing recreates it, so b
    itself evicts nothing that needs room, and its 2 free GPUs are too few for a's pod)."""
    nodes = [
        replace(node(n, state, zone="z"), allocatable={GPU: 8}) for n, state in (("a", S.UPGRADE_REQUIRED), ("b", b))
    ]
    revision = {"a": OLD, "b": NEW if b is S.DONE else OLD}
    pods = [p for n in ("a", "b") for p in (driver_pod(n, revision=revision[n], ready=True), validator(n))]
    pods += [gpus(pod("serve-0", "a"), 4), gpus(pod("notebook", "b", owner=None), 6)]
    return World(snapshot(nodes, pods))


def run(world: World, data: dict[str, Any], now: float, events: list[Event]) -> PassOutcome:
    def apply(actions: list[Any]) -> list[Any]:
        events.extend(a for a in actions if isinstance(a, Event) and a.type == "Warning")
        return world.apply(actions)

    outcome = reconcile(world.snap, policy(**data), now, apply)
    world.snap = replace(world.snap, control=Control(previous=outcome.status))
    return outcome


def states(world: World) -> dict[str, str]:
    return {n.name: n.labels.get(STATE_LABEL, "") for n in world.snap.nodes.values()}


WAIT = {"maxParallelUpgrades": 1, "maxUnavailable": 2, "gpuPodDeletion": {"force": True},
        "gpuCapacity": {"onInsufficient": "wait"}}


def test_a_held_node_lets_another_start_then_waits_named_and_starts_when_room_appears() -> None:
    world, events = fleet(), list[Event]()
    data = {**WAIT, "maxParallelUpgrades": 2}  # so that only room holds a
    first = run(world, data, T0, events)
    assert first.started == ["b"]  # a is passed over: b's bare pod needs no room
    now, seen, messages = T0, [], set()
    while now < T0 + 3600 and states(world)["a"] == "upgrade-required":
        now += 30
        outcome = run(world, data, now, events)
        wait = outcome.status.waiting_on
        seen.append((states(world)["b"], outcome.started, wait.reason if wait else None))
        if states(world)["b"] != "upgrade-done":
            messages.add(outcome.status.message)
    # While b was in progress (cordoned) a waited, named; a started only once b was done and empty
    # (its bare pod deleted under force), at the first pass with room.
    in_progress = [s for s in seen if s[0] not in ("upgrade-done",)]
    assert in_progress and all(r == "insufficient-gpu-capacity" and not started for _, started, r in in_progress)
    assert seen[-1][:2] == ("upgrade-done", ["a"])
    cordoned = "nvidia.com/gpu 0; counted unavailable: b (cordoned)"
    assert messages == {HELD.replace("nvidia.com/gpu 2 (b 2); counted unavailable: none", cordoned)}
    assert [e.node for e in events if e.message.startswith("rollout waiting")] == ["a"]


def test_the_wait_names_node_pods_room_and_since_when_and_ends_when_room_appears() -> None:
    world, events = fleet(b=S.DONE), list[Event]()  # only a can start: the wait itself must be named
    data = WAIT
    first = run(world, data, T0, events)
    assert first.started == [] and states(world)["a"] == "upgrade-required"
    assert (first.status.phase, first.status.message) == ("Running", HELD)
    assert first.status.waiting_on.reason == "insufficient-gpu-capacity"
    assert first.status.waiting_on.nodes == (WaitNode("a", "evicted GPU pods would find no room"),)
    assert first.status.waiting_on.runbook == "runbooks/insufficient-gpu-capacity.md"
    assert first.status.waiting_since == at(0)
    later = run(world, data, T0 + 60, events)
    assert later.started == [] and later.status.waiting_since == at(0)  # the same wait, the same since
    assert events == [Event("a", "Warning", f"rollout waiting: {HELD}")]  # once, not once a pass
    # The bare pod on b finishes: 8 GPUs free, a starts at the next pass and the wait is gone.
    world.snap = replace(world.snap, node_pods={
        **world.snap.node_pods, "b": [p for p in world.snap.node_pods["b"] if p.name != "notebook"]
    })
    freed = run(world, data, T0 + 120, events)
    assert freed.started == ["a"]
    assert freed.status.waiting_on is None and freed.status.waiting_since is None


def test_warn_starts_the_node_as_before() -> None:
    world, events = fleet(b=S.DONE), list[Event]()
    outcome = run(world, {"maxParallelUpgrades": 1, "gpuPodDeletion": {"force": True}}, T0, events)
    assert outcome.started == ["a"] and outcome.status.waiting_on is None
