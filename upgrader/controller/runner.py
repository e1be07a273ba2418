"""Wire a controller to a cluster: API client, settings, leader election, watches, signals."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from kubernetes import client as k8s

from upgrader import __version__
from upgrader.controller.intent import RolloutIntent
from upgrader.controller.lifetime import Elector, Lifetime
from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.metrics import Metrics, MetricsServer
from upgrader.controller.preflight_source import PreflightFiles, PreflightFlags, PreflightSource
from upgrader.controller.settings import Settings
from upgrader.core.fleet.managed import fleet
from upgrader.core.fleet.preflight import Preflight
from upgrader.core.model.states import State
from upgrader.core.model.views import Snapshot
from upgrader.core.plan.policy_fit import fleet_problem, refusal, status_problem
from upgrader.core.policy.policy import OnInsufficientCapacity, Policy
from upgrader.core.rollout.starts import hold_check
from upgrader.inputs import ConfigError
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.cache import ClusterCache
from upgrader.kube.reachability import Backoff
from upgrader.kube.snapshot import take

log = logging.getLogger("upgrader")
logging.getLogger("transitions").setLevel(logging.WARNING)  # one line per trigger is noise in our log


def build_controller(
    api_client: k8s.ApiClient,
    policy: Policy,
    settings: Settings,
    leader_election: bool = True,
    preflight: PreflightFiles | None = None,
) -> Controller:
    """The controller; `preflight`: the preflight's files as `run` read them (else the policy's, read now)."""
    api_client.user_agent = f"upgrader/{__version__} ({settings.identity})"
    api = KubeApi(api_client)
    clock = api.server_clock.now  # every stamp and wait on the API server's clock (kube/server_clock.py)
    elector = None
    if leader_election:
        elector = Elector(
            api,
            settings.namespace,
            settings.lease_name,
            settings.identity,
            settings.lease_duration_seconds,
            clock,
        )
    judge = PreflightSource(api, policy, clock, preflight)
    return Controller(api, policy, settings, clock, elector, judge)


def attach_rollout(controller: Controller, name: str, flags: PreflightFlags | None = None) -> RolloutIntent:
    """`run --rollout NAME`: the DriverRollout object becomes the controller's intent, read at every
    pass; the controller starts on the spec its status kept in force, else on its spec once the first
    pass has judged it (controller/intent.py). RolloutMissing when it is not there."""
    intent = RolloutIntent(controller.api, name, controller.settings, flags)
    controller.intent = intent
    intent.read()
    chosen = intent.starting_policy()
    if chosen is not None:
        controller.adopt(*chosen)
    return intent


def check_policy_against_cluster(controller: Controller, policy_path: str | None = None) -> None:
    """Before the first write: the failure domains the policy names are ones the managed GPU nodes are in.

    One read-only snapshot (GET and LIST only); a policy that does not fit raises ConfigError with the
    one line (`upgrader: error: policy <file>: failureDomains.canary: ...`, exit 2). An ApiError goes to
    the caller: it could not read the cluster, so it cannot judge. Once the policy fits, later passes
    that find it no longer does (the canary zone's nodes removed) say so in the log, see `warn_when_unfit`.
    """
    # With the watch-fed copy made and not started yet, these lists seed it (kube/informer.py): the
    # watches start from them instead of listing the fleet again, and the first pass reads the copy
    # when the Lease stayed free from the peek until it took it (no replica wrote in between).
    if controller.elector is not None:
        controller.elector.peek()  # before the lists: whether the first pass may read their copy
    snapshot, _ = take(controller.api, controller.settings, controller.cache, fresh=True)
    snapshot.carry = controller.carry  # the nodes' facts worked out here serve the first pass too
    if controller.intent is None:  # the object's spec is judged by each pass instead: Valid=False, not exit 2
        problem = fleet_problem(controller.policy, fleet(snapshot).managed, snapshot)
        if problem is not None:
            raise ConfigError(refusal(problem, policy_path))
    if snapshot.interlocks:  # another writer drives the drivers: refuse, naming it and what turns it off
        raise ConfigError(f"refusing to run: {snapshot.interlocks[0].text}")
    say_holds(controller, snapshot)
    warn_when_unfit(controller)


def say_holds(controller: Controller, snapshot: Snapshot) -> None:
    """At start: what the preflight judges by, and which nodes to upgrade it would hold now (their
    pods are not read here: CUDA needs are judged when a node's turn comes)."""
    source = controller.preflight
    if source is None:
        return
    inputs = source.read(snapshot, controller.policy).inputs
    check = hold_check(snapshot, controller.policy, controller.clock(), Preflight(inputs))
    waiting = [n.name for n in fleet(snapshot).managed if n.state is State.UPGRADE_REQUIRED]
    held = [(name, h) for name in waiting if (h := check(name)) is not None]
    shown = "; ".join(f"{name} ({h.kind}: {h.reason})" for name, h in held[:10])
    more = f"; and {len(held) - 10} more" if len(held) > 10 else ""
    log.info(
        "preflight: judging starts by %s; %d of %d nodes at upgrade-required would be held now%s",
        source.describe(),
        len(held),
        len(waiting),
        f": {shown}{more}" if held else "",
    )


def warn_when_unfit(controller: Controller) -> None:
    """A rollout under way goes on when the fleet changes under its policy (the canary zone's nodes
    replaced after it finished is no reason to stop): a WARNING says it once when a pass finds a named
    domain gone, and once more when it is back. The scheduler then orders the domains that are there."""
    said: list[str | None] = [None]

    def check(report: PassReport) -> None:
        if report.status is None:
            return
        problem = status_problem(controller.policy, report.status)
        if problem == said[0]:
            return
        if problem is not None:
            log.warning(
                "the policy no longer fits the cluster: %s; the rollout goes on over the domains there are", problem
            )
        else:
            log.info("the policy fits the cluster again: every failure domain it names has managed GPU nodes")
        said[0] = problem

    controller.on_pass.append(check)


def _check_when_readable(controller: Controller, stop: threading.Event, policy_path: str | None) -> bool:
    """`check_policy_against_cluster`, tried until the cluster answers (nothing is written meanwhile);
    False when `stop` was set first."""
    backoff = Backoff(controller.settings.requeue_seconds, rng=controller.rng)
    reachability = controller.api.reachability
    while not stop.is_set():
        try:
            check_policy_against_cluster(controller, policy_path)
        except ApiError as exc:
            if exc.away:
                reachability.failed("policy check", exc)  # said once, not once per try
            else:
                log.warning("cannot read the cluster to check the policy against it: %s", exc)
            controller.wait(stop, backoff.next())
            continue
        reachability.answered("policy check")
        return True
    return False


def start_watches(controller: Controller, stop: threading.Event, wake: threading.Event) -> ClusterCache:
    """Follow nodes and driver pods: every change wakes the loop, and passes read them from the copy
    (the one `make_cache` made, seeded by the policy check's lists, or a new one)."""
    cache = controller.cache if controller.cache is not None else make_cache(controller, wake)
    cache.start(stop)
    return cache


def make_cache(controller: Controller, wake: threading.Event) -> ClusterCache:
    """The watch-fed copy, not started: lists read before it starts seed it.

    The watches get their own KubeApi, so `controller.api.stats` counts the passes' requests only
    (the metrics count both).
    """
    api = KubeApi(controller.api.client)

    def count(verb: str, outcome: str) -> None:  # whatever the metrics hook is by then
        if controller.api.on_request is not None:
            controller.api.on_request(verb, outcome)

    api.on_request = count
    room = controller.policy.gpu_capacity.on_insufficient is OnInsufficientCapacity.WAIT
    cache = ClusterCache(api, controller.settings, wake.set, room=room)
    for informer in (cache.nodes, cache.driver_pods, cache.pdbs):
        informer.seed_from_first_list()
    controller.cache = cache
    return cache


class Health:
    """Liveness: the loop finished a pass recently. Readiness: that pass talked to the API fine.

    A replica that is not the leader is ready; one that holds the lease but could not act in its
    last pass (its renewals too slow or failing) is not, until a pass acts again.
    """

    def __init__(self, controller: Controller, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.window = max(60.0, 10 * controller.settings.requeue_seconds)
        self.last_pass: float | None = None
        self.last_ok: float | None = None
        self.stale: str | None = None
        controller.on_pass.append(self._seen)
        self.api_away = controller.api.reachability.condition  # the API server away, and for how long

    def _seen(self, report: PassReport) -> None:
        self.last_pass = self.clock()
        self.stale = report.stale
        if report.error is None and report.stale is None:
            self.last_ok = self.last_pass

    def healthy(self) -> bool:
        return self.last_pass is None or self.clock() - self.last_pass < self.window

    def ready(self) -> bool:
        return self.unready_reason() is None

    def unready_reason(self) -> str | None:
        if self.stale is not None:
            return f"holding the lease but could not act: {self.stale}"
        if (away := self.api_away()) is not None:
            return away
        if self.last_ok is None or self.clock() - self.last_ok >= self.window:
            return "no successful pass recently"
        return None


def attach_metrics(controller: Controller, metrics: Metrics) -> None:
    """Feed every pass and API request into the metrics."""

    def observe(report: PassReport) -> None:
        for source, target, seconds in report.transitions:
            metrics.observe_transition(source, target, seconds)
        if report.status is not None and report.leader:
            metrics.rollout.update(report.status)
        metrics.observe_pass(report.result, report.seconds, report.leader)
        metrics.object_missing.set(1 if report.missing and report.leader else 0)

    controller.on_pass.append(observe)
    controller.api.on_request = metrics.count_request


def leading(controller: Controller) -> Callable[[], bool]:
    """Asked at every scrape: this replica's Lease has not expired (no other can have taken it)."""
    elector = controller.elector
    return (lambda: True) if elector is None else elector.held


def serve_metrics(controller: Controller, port: int) -> MetricsServer:
    metrics = Metrics(leading=leading(controller))
    attach_metrics(controller, metrics)
    health = Health(controller)
    return MetricsServer(metrics, port, health.healthy, health.ready, reason=health.unready_reason).start()


def run_until_signalled(
    controller: Controller, policy_path: str | None = None, lifetime: Lifetime | None = None
) -> int:
    """Check the policy against the cluster (`check_policy_against_cluster`: ConfigError when it does
    not fit), then reconcile until SIGTERM/SIGINT; a signal stops the loop between passes, and
    `Controller.run` releases the Lease. `lifetime` is told which signal it was."""
    stop, wake = threading.Event(), threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        log.info("signal %s: stopping after the current pass", name)
        if lifetime is not None and lifetime.why is None:
            lifetime.why = f"signal {name}"
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    make_cache(controller, wake)
    if not _check_when_readable(controller, stop, policy_path):
        return 0  # stopped before the cluster could be read: nothing was written
    start_watches(controller, stop, wake)
    controller.freeze_heap = True  # its own process: see loop.freeze_heap
    controller.run(stop, wake)
    return 0
