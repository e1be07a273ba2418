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
from upgrader.config import Settings
from upgrader.controller import Controller, PassReport
from upgrader.core.policy import Policy
from upgrader.kube.api import KubeApi
from upgrader.kube.cache import ClusterCache
from upgrader.kube.leader import LeaderElector
from upgrader.metrics import Metrics, MetricsServer

log = logging.getLogger("upgrader")
logging.getLogger("transitions").setLevel(logging.WARNING)  # one line per trigger is noise in our log


def build_controller(
    api_client: k8s.ApiClient, policy: Policy, settings: Settings, leader_election: bool = True
) -> Controller:
    api_client.user_agent = f"upgrader/{__version__} ({settings.identity})"
    api = KubeApi(api_client)
    elector = None
    if leader_election:
        elector = LeaderElector(
            api,
            settings.namespace,
            settings.lease_name,
            settings.identity,
            settings.lease_duration_seconds,
            time.time,
        )
    return Controller(api, policy, settings, time.time, elector)


def start_watches(controller: Controller, stop: threading.Event, wake: threading.Event) -> ClusterCache:
    """Follow nodes and driver pods: every change wakes the loop, and passes read them from the copy.

    The watches get their own KubeApi, so `controller.api.stats` counts the passes' requests only
    (the metrics count both).
    """
    api = KubeApi(controller.api.client)

    def count(verb: str, outcome: str) -> None:  # whatever the metrics hook is by then
        if controller.api.on_request is not None:
            controller.api.on_request(verb, outcome)

    api.on_request = count
    cache = ClusterCache(api, controller.settings, wake.set)
    controller.cache = cache
    cache.start(stop)
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
        if self.last_ok is None or self.clock() - self.last_ok >= self.window:
            return "no successful pass recently"
        return None


def attach_metrics(controller: Controller, metrics: Metrics) -> None:
    """Feed every pass and API request into the metrics."""

    def observe(report: PassReport) -> None:
        for source, target, seconds in report.transitions:
            metrics.observe_transition(source, target, seconds)
        if report.status and report.leader:
            metrics.rollout.update(report.status)
        metrics.observe_pass(report.result, report.seconds, report.leader)

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


def run_until_signalled(controller: Controller) -> int:
    """Reconcile until SIGTERM/SIGINT; a signal stops the loop between passes."""
    stop, wake = threading.Event(), threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping after the current pass", signum)
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    start_watches(controller, stop, wake)
    controller.run(stop, wake)
    return 0
