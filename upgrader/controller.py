"""The reconcile loop: snapshot -> decide -> apply -> status, on watch events and a requeue timer."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from upgrader.config import Settings
from upgrader.core.actions import Action, Event, Outcome, Result, Transition
from upgrader.core.policy import Policy
from upgrader.core.reconcile import reconcile
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.apply import Applier
from upgrader.kube.cache import ClusterCache
from upgrader.kube.events import EventRecorder
from upgrader.kube.leader import LeaderElector
from upgrader.kube.snapshot import take

log = logging.getLogger("upgrader")


@dataclass
class PassReport:
    """What one pass did: for the demo's progress display, tests and metrics."""

    acted: bool
    status: dict[str, Any] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    error: str | None = None
    transitions: list[tuple[str, str, float | None]] = field(default_factory=list)  # from, to, seconds in from
    seconds: float = 0.0
    leader: bool = True

    @property
    def result(self) -> str:
        return "error" if self.error else "ok" if self.acted else "not_leader"


class _Writer:
    """The pass's `apply`: writes while we lead, logs what came of it, counts what went wrong."""

    def __init__(self, controller: Controller, applier: Applier) -> None:
        self.controller = controller
        self.applier = applier
        self.errors: list[str] = []

    def apply(self, actions: list[Action]) -> list[Outcome]:
        if not self.controller.leading():
            return []
        done = self.applier.apply(actions)
        for outcome in done:
            self._log(outcome)
        if any(o.result is Result.CONFLICT for o in done):
            # A guarded write met a node other than the one decided on: the copy may lag (or our
            # own write landed and its answer was lost), so the next pass reads the cluster.
            self.controller.fresh_reads = True
        return done

    def _log(self, outcome: Outcome) -> None:
        """Say in the log what people otherwise only see in Events, and count what went wrong."""
        action = outcome.action
        if outcome.result is Result.ERROR:
            text = f"{type(action).__name__} on {getattr(action, 'node', '-')} failed: {outcome.message}"
            self.errors.append(text)
            log.warning(text)
        elif isinstance(action, Event) and outcome.ok:
            (log.warning if action.type == "Warning" else log.info)("%s: %s", action.node, action.message)
        elif isinstance(action, Transition) and outcome.ok:
            log.info(
                "%s: %s -> %s",
                action.node,
                action.source.value if action.source else "(unlabelled)",
                action.target.value,
            )


class Controller:
    def __init__(
        self,
        api: KubeApi,
        policy: Policy,
        settings: Settings,
        clock: Callable[[], float],
        elector: LeaderElector | None = None,
    ) -> None:
        self.api = api
        self.policy = policy
        self.settings = settings
        self.clock = clock
        self.elector = elector
        self.on_pass: list[Callable[[PassReport], None]] = []
        self.cache: ClusterCache | None = None  # set by runner.start_watches
        # LIST rather than trust the cache (set on the first pass, and on any pass that starts
        # without a fresh lease).
        self.fresh_reads = True
        self.events = EventRecorder(api, settings)  # counts repeated Events across passes

    def reconcile(self) -> PassReport:
        """One pass. Never sleeps on the cluster: waits are states with start times on the nodes."""
        started = time.perf_counter()
        # Not holding a fresh lease going in: another replica may have led meanwhile, and the
        # watches may lag what it wrote.
        if self.elector is not None and not self.elector.holds():
            self.fresh_reads = True
        if self.elector is not None and not self.elector.acquire_or_renew():
            report = PassReport(acted=False, leader=False)
        else:
            try:
                report = self._pass()
            except ApiError as exc:
                log.warning("pass aborted: %s", exc)
                report = PassReport(acted=False, error=str(exc))
        report.seconds = time.perf_counter() - started
        for callback in self.on_pass:
            callback(report)
        return report

    def leading(self) -> bool:
        return self.elector is None or self.elector.holds()

    def _pass(self) -> PassReport:
        now, cache = self.clock(), self.cache
        snapshot, raw_nodes = take(self.api, self.settings, cache, self.fresh_reads)
        self.fresh_reads = False
        observe = cache.observe if cache is not None else None
        writer = _Writer(self, Applier(self.api, self.settings, raw_nodes, now, observe, self.events))
        result = reconcile(snapshot, self.policy, now, writer.apply)
        leading = self.leading()
        return PassReport(
            acted=leading,
            status=result.status,
            outcomes=result.outcomes,
            transitions=result.transitions,
            leader=leading,
            error="; ".join(writer.errors) or None,  # a denied or failed write counts as a failed pass
        )

    def run(self, stop: threading.Event, wake: threading.Event | None = None) -> None:
        """Reconcile until `stop` is set: on `wake` (watch events) or every requeue interval."""
        wake = wake or threading.Event()
        pause = min(self.settings.min_pass_interval_seconds, self.settings.requeue_seconds)
        while not stop.is_set():
            self.reconcile()
            if pause and stop.wait(pause):  # events meanwhile keep `wake` set: the next pass takes them all
                break
            wake.wait(self.settings.requeue_seconds - pause)
            wake.clear()
        if self.elector is not None:
            self.elector.release()
