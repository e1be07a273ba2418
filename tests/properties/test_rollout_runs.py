"""Property tests of whole rollouts, pass by pass on a world that settles in between: without blockers
every managed node ends upgrade-done; long runs with blockers, failures and people keep the promises.
"""

from __future__ import annotations

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from upgrader.core.model.states import State
from upgrader.core.policy.policy import Policy

from .invariants import check_pass, check_state, max_unavailable, open_violations
from .invariants_audit import Audit
from .rollout_support import COMMON, INDEX, coverage, examples, settle
from .strategies import fleets, policies
from .world import World, controller_pass, crashing_pass
from .world_objects import FleetSpec

# ----- to the end ------------------------------------------------------------------------------------------

MAX_PASSES = 600


@settings(max_examples=examples(150), **COMMON)  # type: ignore[arg-type]
@given(
    spec=fleets(blockers=False),
    policy=policies(blockers=False),
    interval=st.sampled_from([5, 10, 30]),
    release_at=st.none() | st.integers(0, 60),
)
def test_rollout_without_blockers_ends_with_every_node_done(
    spec: FleetSpec, policy: Policy, interval: int, release_at: int | None
) -> None:
    """No blockers, drivers that come up: passes with time advancing bring every managed node to
    upgrade-done at the newest driver revision, uncordoned unless someone else had cordoned it.

    `release_at`: a newer driver revision appears before that pass, whatever state the nodes are in
    (in validation-required too: see test_found_bugs.py)."""
    world = World(spec)
    managed = world.managed()
    # Nodes someone else cordoned stay cordoned and count against maxUnavailable for good, skipped
    # ones too (docs/policy.md); when they use it all up, the rest never starts: that is a blocker.
    gpu_nodes = [n for n in world.nodes.values() if n.gpu]
    assume(sum(1 for n in gpu_nodes if n.foreign_cordon) < max_unavailable(policy, len(gpu_nodes)))
    audit = Audit(policy)
    world.auditors.append(audit)
    released = -1 if release_at is None else MAX_PASSES  # the pass before which it was released
    for number in range(MAX_PASSES):
        if release_at is not None and number >= release_at and released == MAX_PASSES:
            world.new_driver_revision()
            released = number
        result = controller_pass(world, policy)
        broken = open_violations(audit.violations + check_pass(world, policy, result) + check_state(world, policy))
        assert not broken, "\n".join(broken)
        if result.status.phase == "Done" and number > released:  # a pass that saw the release
            break
        settle(world)
        world.advance(interval)
    states = {n.name: n.state for n in managed}
    assert all(s is State.DONE for s in states.values()), (states, world.last_status_message())
    for n in managed:
        assert n.unschedulable == n.foreign_cordon, f"{n.name}: unschedulable={n.unschedulable}"
        assert [p.labels["controller-revision-hash"] for p in world.driver_pods_on(n.name)] == [world.newest]


# ----- long rollouts with blockers, failures and people ------------------------------------------------

MOVES = (
    "resume",
    "acknowledge",
    "pause",
    "relabel-failed",
    "publish-image",
    "cordon",
    "relax-budgets",
    "crash-driver",
    "remove-gpu-daemonset",
    "newer-driver",
    "tweak-driver",
    "delete-failed-driver",
    "request-upgrade",
    "crash",
)


def operator_move(world: World, move: str, i: int) -> None:
    """One thing a person (or the cluster) does in the middle of a long rollout."""
    if move == "resume":
        world.resume()
    elif move == "acknowledge":
        world.acknowledge()
    elif move == "pause":
        world.pause()
    elif move == "relabel-failed":
        failed = sorted(n.name for n in world.nodes.values() if n.state is State.FAILED)
        if failed:
            world.relabel(failed[i % len(failed)], State.UPGRADE_REQUIRED)
    elif move == "publish-image":
        for node in world.nodes.values():
            world.fix_image(node.name)
    elif move == "cordon":
        nodes = sorted(n.name for n in world.nodes.values() if not n.unschedulable)
        if nodes:
            world.cordon_by_other(nodes[i % len(nodes)])
    elif move == "relax-budgets":
        for budget in world.budgets.values():
            budget.min_available = 0
    elif move == "remove-gpu-daemonset":
        for pod in world.gpu_daemon_pods():
            world.remove_gpu_daemon(pod.uid)
    elif move == "newer-driver":
        world.new_driver_revision()
    elif move == "tweak-driver":
        world.tweak_driver_template()
    elif move == "delete-failed-driver":
        for pod in world.running_or_failing_drivers():
            if world.nodes[pod.node].state is State.FAILED:
                world.delete_driver_pod(pod.uid)
    elif move == "request-upgrade":
        gpu = sorted(n.name for n in world.nodes.values() if n.gpu)
        world.request_upgrade(gpu[i % len(gpu)])
    elif move == "crash-driver":
        pods = world.running_drivers()
        if pods:
            world.driver_crash(pods[i % len(pods)].uid)


ROUNDS = 150


@settings(max_examples=examples(150), **COMMON)  # type: ignore[arg-type]
@given(
    spec=fleets(),
    policy=policies(),
    script=st.lists(st.tuples(st.integers(0, ROUNDS - 1), st.sampled_from(MOVES), INDEX), max_size=10),
    interval=st.sampled_from([10, 30, 60, 120]),
)
def test_long_rollouts_with_blockers_and_failures_keep_promises(
    spec: FleetSpec, policy: Policy, script: list[tuple[int, str, int]], interval: int
) -> None:
    """Deep runs the state machine rarely reaches: the cluster settles between passes except for
    its blockers (missing images, unmanaged pods, tight budgets), and people step in on a script:
    failures get acknowledged or retried, images published, budgets relaxed, nodes cordoned."""
    world = World(spec)
    audit = Audit(policy)
    world.auditors.append(audit)
    for round_ in range(ROUNDS):
        crash = None
        for _, move, i in (s for s in script if s[0] == round_):
            if move == "crash":
                crash = i % 10  # this round's pass loses the API after that many writes
            else:
                operator_move(world, move, i)
        result = controller_pass(world, policy) if crash is None else crashing_pass(world, policy, crash)
        checks = check_pass(world, policy, result) + check_state(world, policy)
        broken = open_violations(audit.violations + checks)
        assert not broken, "\n".join(broken)
        settle(world)
        world.advance(interval)
    for line in coverage(world, policy, ROUNDS):
        event(line)
