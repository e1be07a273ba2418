"""The reconcile loop: snapshot -> decide -> apply -> status, on watch events and a requeue timer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from upgrader.config import Settings
from upgrader.core import rollout
from upgrader.core.actions import Action, Event, Outcome, WriteStatus
from upgrader.core.policy import Policy
from upgrader.core.status import meaningful, rollout_status
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.apply import Applier
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

    def reconcile(self) -> PassReport:
        """One pass. Never sleeps on the cluster: waits are states with start times on the nodes."""
        if self.elector is not None and not self.elector.acquire_or_renew():
            return self._report(PassReport(acted=False))
        try:
            report = self._pass()
        except ApiError as exc:
            log.warning("pass aborted: %s", exc)
            report = PassReport(acted=False, error=str(exc))
        return self._report(report)

    def _report(self, report: PassReport) -> PassReport:
        for callback in self.on_pass:
            callback(report)
        return report

    def _leading(self) -> bool:
        return self.elector is None or self.elector.holds()

    def _pass(self) -> PassReport:
        now = self.clock()
        policy = self.policy
        snapshot, raw_nodes = take(self.api, self.settings)
        applier = Applier(self.api, self.settings, raw_nodes, now)
        outcomes: list[Outcome] = []
        waiting: list[dict[str, str]] = []

        def act(actions: list[Action]) -> list[Outcome]:
            if not actions or not self._leading():
                return []
            done = applier.apply(actions)
            outcomes.extend(done)
            return done

        if policy.auto_upgrade:
            detected = act(rollout.detect(snapshot, policy, now))
            snapshot = rollout.project(snapshot, [o.action for o in detected if o.ok])
            for ctx, plan in rollout.plan_steps(snapshot, policy):
                attempted = act(list(plan.attempts))
                if plan.attempts and not attempted:
                    continue  # lost leadership mid-pass
                decided = rollout.conclude(ctx, plan, attempted, now)
                conclusion = act(decided)
                snapshot = rollout.project(snapshot, [o.action for o in conclusion if o.ok])
                entry = rollout.waiting_entry(ctx, plan, decided)
                if entry is not None:
                    waiting.append(entry)
        fleet = rollout.fleet(snapshot)
        managed = [n.name for n in fleet.managed]
        acknowledged = rollout.acknowledged_failures(snapshot)
        halted = rollout_status(
            snapshot, policy, managed, fleet.skipped, fleet.invalid, None, acknowledged, now
        )["phase"] in ("Halted", "Paused")
        schedule, starts = rollout.start_nodes(snapshot, policy, now, not halted, acknowledged)
        started = act(starts)
        snapshot = rollout.project(snapshot, [o.action for o in started if o.ok])
        status = rollout_status(
            snapshot, policy, managed, fleet.skipped, fleet.invalid, schedule, acknowledged, now, waiting
        )
        previous = dict(snapshot.control.previous)
        if meaningful(status) != meaningful(previous):
            act([WriteStatus(status), *self._phase_events(previous, status)])
        return PassReport(acted=self._leading(), status=status, outcomes=outcomes)

    @staticmethod
    def _phase_events(previous: dict[str, Any], status: dict[str, Any]) -> list[Action]:
        """A Warning on the node that halted the rollout, when the rollout becomes Halted."""
        if status["phase"] != "Halted" or previous.get("phase") == "Halted":
            return []
        culprit = (status["blocked"] or status["failed"] or [{}])[0].get("node")
        return [Event(culprit, "Warning", f"rollout {status['message']}")] if culprit else []

    def run(self, stop: threading.Event, wake: threading.Event | None = None) -> None:
        """Reconcile until `stop` is set: on `wake` (watch events) or every requeue interval."""
        wake = wake or threading.Event()
        while not stop.is_set():
            self.reconcile()
            wake.wait(self.settings.requeue_seconds)
            wake.clear()
        if self.elector is not None:
            self.elector.release()
