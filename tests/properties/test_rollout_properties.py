"""Property tests of the pure decision core: random fleets, policies and event orders keep the
rollout's promises (docs/policy.md).

`RolloutMachine` drives a `World` (world.py: a small cluster with API-server semantics) through
controller passes interleaved with whatever else a cluster does: time passing, pods finishing their
termination, the DaemonSet creating driver pods that come up (or stay not Ready where the image is
missing), drivers crashing, jobs finishing and starting, ReplicaSets replacing evicted replicas,
budgets changing, someone else cordoning nodes, operators retrying failed nodes, pausing and
resuming. Each such change is a watch event, so each rule ends with `then` controller passes (0 =
the change coalesces with the next one). After every rule the invariants (invariants.py,
invariants_audit.py) are checked. `test_rollout_without_blockers_ends_with_every_node_done`
(test_rollout_runs.py) drives fleets without blockers to the end: every node upgrade-done,
uncordoned unless someone else had cordoned it.

Size: by default the whole suite runs in well under a minute on two CI cores. A bigger search:

    UPGRADER_PROPERTY_EXAMPLES=2000 .venv/bin/pytest tests/properties

sets every test's example count (UPGRADER_PROPERTY_STEPS sets the state machine's steps per example,
default 100; UPGRADER_PROPERTY_STRICT=1 also reports the known, still open core bugs listed in
invariants.KNOWN_BUGS, none at present). `--hypothesis-show-statistics` shows how far the runs got (states reached,
refused evictions, blocks, domains started, phases).
"""

from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from upgrader.core.model.states import STARTED_AT, STATE_SINCE, WAS_UNSCHEDULABLE, State
from upgrader.core.policy.policy import Policy

from .invariants import check_pass, check_state, open_violations
from .invariants_audit import Audit
from .rollout_support import COMMON, INDEX, STEPS, coverage, examples, settle
from .strategies import fleets, policies
from .world import World, controller_pass, crashing_pass
from .world_objects import JOB, FleetSpec

THEN = st.integers(0, 2)  # controller passes a watch event triggers
SECONDS = st.sampled_from([1, 10, 30, 60, 120, 300, 601, 1800])


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
        """`upgrader resume`: unpause only."""
        self.world.resume()
        self.reconcile(then)

    @rule(then=THEN)
    def acknowledge(self, then: int) -> None:
        """`upgrader acknowledge --all`: the failures recorded so far, each by its failed-at."""
        self.world.acknowledge()
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
