"""Property tests of the pure decision core: random fleets, policies and event orders keep the
rollout's promises (docs/policy.md).

`RolloutMachine` drives a `World` (world.py: a small cluster with API-server semantics) through
controller passes interleaved with whatever else a cluster does: time passing, pods finishing their
termination, the DaemonSet creating driver pods that come up (or stay not Ready where the image is
missing), drivers crashing, jobs finishing and starting, ReplicaSets replacing evicted replicas,
budgets changing, someone else cordoning nodes, operators retrying failed nodes, pausing and
resuming. Each such change is a watch event, so each rule ends with `then` controller passes (0 =
the change coalesces with the next one). After every rule the invariants (invariants.py) are
checked. `test_rollout_without_blockers_ends_with_every_node_done` drives fleets without blockers
to the end: every node upgrade-done, uncordoned unless someone else had cordoned it.

Size: by default the whole suite runs in well under a minute on two CI cores. A bigger search:

    UPGRADER_PROPERTY_EXAMPLES=2000 .venv/bin/pytest tests/properties

sets every test's example count (UPGRADER_PROPERTY_STEPS sets the state machine's steps per example,
default 100; UPGRADER_PROPERTY_STRICT=1 also reports the known, still open core bugs listed in
invariants.KNOWN_BUGS, none at present). `--hypothesis-show-statistics` shows how far the runs got (states reached,
refused evictions, blocks, domains started, phases).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from upgrader.core.actions import Annotate, Result, Transition
from upgrader.core.policy import Policy
from upgrader.core.states import BLOCKED_KIND, IN_PROGRESS, STARTED_AT, STATE_SINCE, WAS_UNSCHEDULABLE, State

from .invariants import Audit, check_pass, check_state, domain_sequence, max_unavailable, open_violations
from .strategies import fleets, policies
from .world import JOB, FleetSpec, World, controller_pass, crashing_pass

EXAMPLES = int(os.environ.get("UPGRADER_PROPERTY_EXAMPLES", "0"))
STEPS = int(os.environ.get("UPGRADER_PROPERTY_STEPS", "100"))
COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}
THEN = st.integers(0, 2)  # controller passes a watch event triggers
INDEX = st.integers(0, 63)  # picks one of the objects a rule could act on
SECONDS = st.sampled_from([1, 10, 30, 60, 120, 300, 601, 1800])


def examples(default: int) -> int:
    return EXAMPLES or default


def settle(world: World) -> None:
    """A cluster without blockers, one requeue interval later: terminations finish, the DaemonSet
    brings drivers up, jobs on nodes being upgraded finish, ReplicaSets refill and turn Ready."""
    for pod in list(world.terminating()):
        world.disappear(pod.uid)
    for node in world.nodes_missing_driver():
        world.create_driver(node)
    for pod in world.starting_drivers():
        world.driver_ready(pod.uid)
    for pod in world.running_jobs():
        if world.nodes[pod.node].state in IN_PROGRESS:
            world.finish_job(pod.uid)
    for workload in world.workloads.values():
        while nodes := world.placements(workload):
            world.reschedule(workload.name, nodes[0], ready=True)
    for pod in world.unready_pods():
        world.pod_ready(pod.uid)


def coverage(world: World, policy: Policy, passes: int) -> list[str]:
    """How far a run got, as hypothesis events."""
    applied = [(a, r) for _, a, r in world.actions]
    reached = {a.target for a, r in applied if isinstance(a, Transition) and r is Result.OK}
    lines = [f"reached {s.value}" for s in State if s in reached]
    lines += sorted({f"{type(a).__name__} {r.value}" for a, r in applied if r is not Result.OK})
    if any(isinstance(a, Annotate) and a.annotations.get(BLOCKED_KIND) for a, _ in applied):
        lines.append("a node was blocked")
    managed = world.managed()
    later = set(domain_sequence(managed, policy)[1:])
    if any(n.zone in later and n.started_seq >= 0 for n in managed):
        lines.append("a domain after the canary started")
    if any(n.foreign_at_start for n in managed):
        lines.append("a node someone else cordoned was started")
    lines += sorted({f"phase {s['phase']}" for s in world.statuses})
    lines.append(f"passes {min(passes // 10 * 10, 50)}+")
    return lines


class RolloutMachine(RuleBasedStateMachine):
    world: World
    policy: Policy
    audit: Audit
    passes: int
    pass_violations: list[str]

    @initialize(spec=fleets(), policy=policies())
    def build(self, spec: FleetSpec, policy: Policy) -> None:
        self.world = World(spec)
        self.policy = policy
        self.audit = Audit(policy)
        self.world.auditors.append(self.audit)
        self.passes = 0
        self.pass_violations = []

    def reconcile(self, passes: int) -> None:
        for _ in range(passes):
            self.passes += 1
            result = controller_pass(self.world, self.policy)
            self.pass_violations += check_pass(self.world, self.policy, result)

    # ----- the controller and the clock ------------------------------------------------------------

    @rule(writes=st.integers(0, 12))
    def controller_crashes_mid_pass(self, writes: int) -> None:
        """A pass whose writes stop landing after `writes` of them (killed, or the API went away);
        the next pass must continue from what the cluster holds."""
        self.passes += 1
        result = crashing_pass(self.world, self.policy, writes)
        self.pass_violations += check_pass(self.world, self.policy, result)

    @rule(then=st.integers(1, 4))
    def controller_passes(self, then: int) -> None:
        """Back-to-back passes: each node goes at most one step further per pass."""
        self.reconcile(then)

    @rule(seconds=SECONDS, then=THEN)
    def time_passes(self, seconds: int, then: int) -> None:
        """Time goes by; with `then` > 0 the requeue timer fires."""
        self.world.advance(seconds)
        self.reconcile(then)

    @rule(seconds=st.sampled_from([10, 30, 60]), then=st.integers(1, 2))
    def cluster_catches_up(self, seconds: int, then: int) -> None:
        """Everything pending happens at once (`settle`) and time passes: a shortcut that lets runs
        get deep into a rollout between the finer-grained events."""
        settle(self.world)
        self.world.advance(seconds)
        self.reconcile(then)

    # ----- pods and drivers ------------------------------------------------------------------------

    @rule(i=INDEX, then=THEN)
    def terminating_pod_disappears(self, i: int, then: int) -> None:
        pods = self.world.terminating()
        if pods:
            self.world.disappear(pods[i % len(pods)].uid)
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def daemonset_creates_driver_pod(self, i: int, then: int) -> None:
        """At the newest revision, not Ready yet (ImagePullBackOff where the image is missing)."""
        nodes = self.world.nodes_missing_driver()
        if nodes:
            self.world.create_driver(nodes[i % len(nodes)])
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def driver_pod_becomes_ready(self, i: int, then: int) -> None:
        pods = self.world.starting_drivers()
        if pods:
            self.world.driver_ready(pods[i % len(pods)].uid)
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def driver_pod_crashes(self, i: int, then: int) -> None:
        pods = self.world.running_drivers()
        if pods:
            self.world.driver_crash(pods[i % len(pods)].uid)
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def missing_image_gets_published(self, i: int, then: int) -> None:
        nodes = sorted(n.name for n in self.world.nodes.values() if n.image_broken)
        if nodes:
            self.world.fix_image(nodes[i % len(nodes)])
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def job_finishes(self, i: int, then: int) -> None:
        pods = self.world.running_jobs()
        if pods:
            self.world.finish_job(pods[i % len(pods)].uid)
        self.reconcile(then)

    @rule(i=INDEX, gpus=st.sampled_from([0, 1]), then=THEN)
    def job_starts(self, i: int, gpus: int, then: int) -> None:
        nodes = [n for n in self.world.schedulable(gpus) if self.world.nodes[n].gpu]
        if nodes and sum(1 for p in self.world.pods.values() if p.kind == JOB) < 6:
            self.world.start_job(nodes[i % len(nodes)], gpus)
        self.reconcile(then)

    @rule(i=INDEX, j=INDEX, ready=st.booleans(), then=THEN)
    def replicaset_replaces_replica(self, i: int, j: int, ready: bool, then: int) -> None:
        short = [w for w in self.world.workloads.values() if self.world.placements(w)]
        if short:
            workload = short[i % len(short)]
            nodes = self.world.placements(workload)
            self.world.reschedule(workload.name, nodes[j % len(nodes)], ready)
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def replica_becomes_ready(self, i: int, then: int) -> None:
        pods = self.world.unready_pods()
        if pods:
            self.world.pod_ready(pods[i % len(pods)].uid)
        self.reconcile(then)

    # ----- people ----------------------------------------------------------------------------------

    @rule(i=INDEX, then=THEN)
    def gpu_daemonset_taken_off_node(self, i: int, then: int) -> None:
        """A DaemonSet pod holding a GPU (which blocks the driver restart) is removed by its owner."""
        pods = self.world.gpu_daemon_pods()
        if pods:
            self.world.remove_gpu_daemon(pods[i % len(pods)].uid)
        self.reconcile(then)

    @rule(i=INDEX, value=st.integers(0, 5), then=THEN)
    def budget_min_available_changes(self, i: int, value: int, then: int) -> None:
        budgets = sorted(self.world.budgets)
        if budgets:
            self.world.budgets[budgets[i % len(budgets)]].min_available = value
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def someone_else_cordons(self, i: int, then: int) -> None:
        nodes = sorted(n.name for n in self.world.nodes.values() if not n.unschedulable)
        if nodes:
            self.world.cordon_by_other(nodes[i % len(nodes)])
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def someone_else_uncordons(self, i: int, then: int) -> None:
        """`kubectl uncordon`, mid-upgrade or not: upgrader cordons a node in progress again."""
        nodes = sorted(n.name for n in self.world.nodes.values() if n.unschedulable)
        if nodes:
            self.world.uncordon_by_other(nodes[i % len(nodes)])
        self.reconcile(then)

    @rule(i=INDEX, value=st.sampled_from([*(s.value for s in State), "bogus"]), then=THEN)
    def someone_sets_a_state_by_hand(self, i: int, value: str, then: int) -> None:
        """`kubectl label node X nvidia.com/gpu-driver-upgrade-state=<anything> --overwrite`."""
        nodes = sorted(n.name for n in self.world.nodes.values() if n.gpu)
        self.world.hand_set_label(nodes[i % len(nodes)], value)
        self.reconcile(then)

    @rule(i=INDEX, key=st.sampled_from([WAS_UNSCHEDULABLE, STARTED_AT, STATE_SINCE]), then=THEN)
    def someone_removes_a_record(self, i: int, key: str, then: int) -> None:
        """`kubectl annotate node X gpu-upgrader.io/<record>-`."""
        nodes = sorted(n.name for n in self.world.nodes.values() if n.gpu)
        self.world.drop_annotation(nodes[i % len(nodes)], key)
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def operator_relabels_failed_node(self, i: int, then: int) -> None:
        """`kubectl label node X nvidia.com/gpu-driver-upgrade-state=upgrade-required --overwrite`."""
        nodes = sorted(n.name for n in self.world.nodes.values() if n.state is State.FAILED)
        if nodes:
            self.world.relabel(nodes[i % len(nodes)], State.UPGRADE_REQUIRED)
        self.reconcile(then)

    @rule(then=THEN)
    def newer_driver_released(self, then: int) -> None:
        """The driver DaemonSet gets a newer revision mid-rollout (at most once)."""
        self.world.new_driver_revision()
        self.reconcile(then)

    @rule(then=THEN)
    def driver_template_tweaked(self, then: int) -> None:
        """A label or toleration of the driver template changes (at most once): a revision with the
        same DRIVER_CONFIG_DIGEST, upgraded by restarting the driver under its GPU pods."""
        self.world.tweak_driver_template()
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def operator_deletes_driver_pod_of_failed_node(self, i: int, then: int) -> None:
        """The runbook's fix for a failed node: delete its driver pod so the DaemonSet recreates it."""
        pods = [p for p in self.world.running_or_failing_drivers() if self.world.nodes[p.node].state is State.FAILED]
        if pods:
            self.world.delete_driver_pod(pods[i % len(pods)].uid)
        self.reconcile(then)

    @rule(i=INDEX, skip=st.booleans(), then=THEN)
    def operator_sets_skip_label(self, i: int, skip: bool, then: int) -> None:
        """`nvidia.com/gpu-driver-upgrade.skip=true` on (or off) a node, at any point of its way."""
        nodes = sorted(self.world.nodes)
        self.world.set_skip(nodes[i % len(nodes)], skip)
        self.reconcile(then)

    @rule(i=INDEX, then=THEN)
    def operator_requests_upgrade(self, i: int, then: int) -> None:
        """`nvidia.com/gpu-driver-upgrade-requested=true` on a node, whatever its driver."""
        nodes = sorted(n.name for n in self.world.nodes.values() if n.gpu)
        if nodes:
            self.world.request_upgrade(nodes[i % len(nodes)])
        self.reconcile(then)

    @rule(then=THEN)
    def pause(self, then: int) -> None:
        self.world.pause()
        self.reconcile(then)

    @rule(then=THEN)
    def resume(self, then: int) -> None:
        """`upgrader resume`: unpause, and acknowledge the failures recorded so far."""
        self.world.resume()
        self.reconcile(then)

    # ----- the promises ----------------------------------------------------------------------------

    @invariant()
    def promises_kept(self) -> None:
        broken = open_violations(self.audit.violations + check_state(self.world, self.policy) + self.pass_violations)
        assert not broken, "\n".join(broken)

    def teardown(self) -> None:
        if hasattr(self, "world"):
            for line in coverage(self.world, self.policy, self.passes):
                event(line)


RolloutMachine.TestCase.settings = settings(
    max_examples=examples(250),
    stateful_step_count=STEPS,
    **COMMON,  # type: ignore[arg-type]
)
TestRollout = RolloutMachine.TestCase


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
        if result.status["phase"] == "Done" and number > released:  # a pass that saw the release
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
