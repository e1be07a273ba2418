"""The reconcile loop: snapshot -> decide -> apply -> status, on watch events and a requeue timer."""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from upgrader.controller.alert_source import PrometheusAlerts
from upgrader.controller.intent import RolloutIntent
from upgrader.controller.notifier import Notifier
from upgrader.controller.preflight_source import PreflightFiles, PreflightSource
from upgrader.controller.settings import Settings
from upgrader.core.model.actions import Action, Event, Outcome, Result, Transition
from upgrader.core.model.timefmt import rfc3339
from upgrader.core.node.facts import FactsCarry
from upgrader.core.policy.notices import notices, staged_canary
from upgrader.core.policy.pending_taint_policy import TaintPendingNodes
from upgrader.core.policy.policy import OnInsufficientCapacity, Policy
from upgrader.core.report.document import RolloutStatus
from upgrader.core.report.entries import WaitingOn
from upgrader.core.rollout.node_events import waiting_line
from upgrader.core.rollout.reconcile import reconcile
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.apply import Applier
from upgrader.kube.cache import ClusterCache
from upgrader.kube.events import EventRecorder
from upgrader.kube.leader import LeaderElector
from upgrader.kube.reachability import Backoff
from upgrader.kube.rollout_object import RolloutMissing
from upgrader.kube.snapshot import take

log = logging.getLogger("upgrader")


@dataclass
class PassReport:
    """What one pass did: for the demo's progress display, tests and metrics."""

    acted: bool
    status: RolloutStatus | None = None  # None: no status judged (no valid spec ever, or the pass failed)
    outcomes: list[Outcome] = field(default_factory=list)
    error: str | None = None
    transitions: list[tuple[str, str, float | None]] = field(default_factory=list)  # from, to, seconds in from
    seconds: float = 0.0
    leader: bool = True  # we hold the lease: our last renewal was acknowledged and nobody took it since
    stale: str | None = None  # why we held the lease but could not act (writes were skipped)
    missing: str | None = None  # the DriverRollout (or its CRD) is gone: why (controller/intent.py)

    @property
    def result(self) -> str:
        if self.error:
            return "error"
        return "stale_lease" if self.stale else "ok" if self.acted else "not_leader"


class _Writer:
    """The pass's `apply`: writes while we lead, logs what came of it, counts what went wrong."""

    def __init__(self, controller: Controller, applier: Applier) -> None:
        self.controller = controller
        self.elector = controller.elector
        self.applier = applier
        self.errors: list[str] = []
        self.causes: set[str] = set()  # the failures' messages said this pass
        self.closed = False  # the lease went stale or was lost: nothing more is written this pass
        self.stale: str | None = None  # why, when the lease was not lost but could not be renewed in time

    def may_write(self) -> bool:
        """Each write is sent on a fresh lease: renewed (one request) when getting old, not dropped."""
        if self.elector is None:
            return True
        if not self.closed and not self.elector.renew_if_old():
            self.closed = True  # the rest of the pass was decided on a lease we may no longer hold
            # Lost (someone else wrote the Lease) is not stale: our renewal is gone, not late.
            self.stale = self.elector.why_stale() if self.elector.age() is not None else None
        return not self.closed

    def apply(self, actions: list[Action]) -> list[Outcome]:
        done: list[Outcome] = []
        for action in actions:  # a batch cut short leaves the rest undone; later batches write nothing
            if not self.may_write():
                break
            done.append(self.applier.apply_one(action))
        for outcome in done:
            self._log(outcome)
        if any(o.result is Result.CONFLICT for o in done):
            # A guarded write met a node other than the one decided on: the copy may lag (or our
            # own write landed and its answer was lost), so the next pass reads the cluster.
            self.controller.fresh_reads = True
        return done

    def _log(self, outcome: Outcome) -> None:
        """Say in the log what people otherwise only see in Events, and count what went wrong.

        Each line about a node carries it as fields too (`extra=`: a JSON log's `node`, `state`,
        `reason`, commands/logs.py): its state label after the pass's writes (a transition's: its
        target), and the reason `status` shows for it (failed, blocked or held), or the failed write's.
        """
        from upgrader.core.model.states import BLOCKED_REASON, FAILED_REASON, HELD_REASON, STATE_LABEL, State

        action = outcome.action
        node: str | None = getattr(action, "node", None)
        held = self.applier.nodes.get(node, {}) if node else {}
        state = ((held.get("metadata") or {}).get("labels") or {}).get(STATE_LABEL)
        if isinstance(action, Transition) and outcome.ok:
            state = action.target.value
        marks = (held.get("metadata") or {}).get("annotations") or {}
        reason = marks.get(FAILED_REASON) if state == State.FAILED.value else None
        reason = reason or marks.get(BLOCKED_REASON) or marks.get(HELD_REASON)
        if outcome.result is Result.ERROR:
            reason = outcome.message
        fields = {key: value for key, value in (("node", node), ("state", state), ("reason", reason)) if value}
        if outcome.result is Result.ERROR:
            text = f"{type(action).__name__} on {node or '-'} failed: {outcome.message}"
            # One cause, one WARNING a pass (an API server refusing every write refuses them all);
            # the writes after the first it failed are DEBUG lines (-vv), each counted all the same.
            said = outcome.message in self.causes
            self.causes.add(outcome.message)
            self.errors.append(text)
            (log.debug if said else log.warning)(text, extra=fields)
        elif isinstance(action, Event) and outcome.ok:
            (log.warning if action.type == "Warning" else log.info)("%s: %s", action.node, action.message, extra=fields)
        elif isinstance(action, Transition) and outcome.ok:
            log.info(
                "%s: %s -> %s",
                action.node,
                action.source.value if action.source else "(unlabelled)",
                action.target.value,
                extra=fields,
            )


def freeze_heap() -> None:
    """Take what the process holds now out of the cyclic collector's sight (`gc.freeze`).

    Once the watch-fed copies have listed, the process holds hundreds of thousands of views for as
    long as it runs (at 15,000 nodes with the GPU pods copy, over a million tracked objects), and
    every full collection traced them all: 300 ms in the one pass it fell in (bench/README.md). The
    views hold no reference cycles, so reference counting frees each one when the copy replaces it;
    frozen, they are never traced again. Done once: what is made later is collected as ever. No
    collection first (a full one costs the 300 ms this saves): the little cyclic garbage a start
    leaves, if any, stays.
    """
    gc.freeze()


class Controller:
    def __init__(
        self,
        api: KubeApi,
        policy: Policy,
        settings: Settings,
        clock: Callable[[], float],
        elector: LeaderElector | None = None,
        preflight: PreflightSource | None = None,
    ) -> None:
        self.api = api
        self.policy = policy
        self.settings = settings
        self.clock = clock
        self.elector = elector
        self.on_pass: list[Callable[[PassReport], None]] = []
        self.cache: ClusterCache | None = None  # set by runner.start_watches
        # LIST rather than trust the cache (set on the first pass, on any pass that took the lease
        # rather than renewed our own, and after a refused write).
        self.fresh_reads = True
        self.events = EventRecorder(api, settings)  # counts repeated Events across passes
        # What the rollout waited on when this process last said so: logged once per change, not every pass.
        self.last_waiting: WaitingOn | None = None
        # How `run` waits (tests put a virtual clock here) and draws its backoff's jitter.
        self.wait: Callable[[threading.Event, float], bool] = lambda event, seconds: event.wait(seconds)
        self.rng = random.Random()
        # With an alertGate in the policy: asked once per pass, before deciding (core/policy/alert_gate.py).
        gate = policy.alert_gate
        self.alerts: PrometheusAlerts | None = PrometheusAlerts(gate) if gate is not None else None
        # What a start is judged by before it is made, as `plan` judges it (core/fleet/preflight.py).
        self.preflight = preflight
        # Each node's facts from earlier passes, reused while the node is unchanged (core/node/facts.py).
        self.carry = FactsCarry()
        # `upgrader run` (its own process) sets it: once every copy has listed, the heap is frozen.
        self.freeze_heap = False
        # `run --rollout NAME`: the DriverRollout object, read every pass (controller/intent.py);
        # None: the policy given at start, and the control ConfigMap (`run --policy FILE`).
        self.intent: RolloutIntent | None = None
        # The policy's webhooks (core/policy/notices.py): a thread of its own, started with the first notice.
        self.notifier: Notifier | None = None

    def adopt(self, policy: Policy, files: PreflightFiles) -> None:
        """Act on `policy` from this pass on (a spec generation the rollout object put in force)."""
        old_gate, gate = self.policy.alert_gate, policy.alert_gate
        self.policy = policy
        if gate != old_gate:  # a new Prometheus to ask, or none: its own connection pool
            self.alerts = PrometheusAlerts(gate) if gate is not None else None
        if self.preflight is not None:
            self.preflight = PreflightSource(self.api, policy, self.clock, files)

    def reconcile(self) -> PassReport:
        """One pass. Never sleeps on the cluster: waits are states with start times on the nodes."""
        started = time.perf_counter()
        elector = self.elector
        if elector is not None and elector.acquire_or_renew() and elector.reacquired:
            # Another replica may have led meanwhile and the watches may lag it; unless the Lease was
            # free from before the copy's lists until we took it (LeaderElector.peek).
            self.fresh_reads = not elector.took_free
        if elector is not None and not elector.holds():
            # Not the leader; or still holding the lease, but the renewal failed or its answer came
            # too late to act on.
            held = elector.held()
            stale = elector.why_stale() if held else None
            # A lease we cannot read or write is an error, not another replica leading.
            error = None if held or elector.last_error is None else f"leader lease: {elector.last_error}"
            report = PassReport(acted=False, leader=held, stale=stale, error=error)
        else:
            try:
                report = self._pass()
            except ApiError as exc:  # an API server that is away is said once, by `run`
                (log.debug if exc.away else log.warning)("pass aborted: %s", exc)
                report = PassReport(acted=False, error=str(exc))
        if report.stale and elector is not None:
            log.warning("holding the lease %s/%s but could not act: %s", elector.namespace, elector.name, report.stale)
        self._say_waiting(report)
        report.seconds = time.perf_counter() - started
        for callback in self.on_pass:
            callback(report)
        return report

    def _say_waiting(self, report: PassReport) -> None:
        """Log what no node starting waits on, when it changed. The pass's Event says it in the log
        already when the cluster's last status had another wait; a restarted process says it itself."""
        if not report.acted or report.status is None:
            return
        waiting = report.status.waiting_on
        if waiting == self.last_waiting:
            return
        self.last_waiting = waiting
        if waiting is None:
            return
        line = waiting_line(report.status.message)
        if any(isinstance(o.action, Event) and o.ok and o.action.message == line for o in report.outcomes):
            return
        (log.warning if waiting.runbook else log.info)(line)

    def _pass(self) -> PassReport:
        now, cache, intent = self.clock(), self.cache, self.intent
        missing = None
        if intent is not None:
            try:
                intent.read()
            except RolloutMissing as exc:  # said once per change (intent.py)
                if intent.in_force is None:  # no spec was ever in force: nothing to finish
                    return PassReport(acted=False, error=str(exc), missing=str(exc))
                missing = str(exc)
        room = self.policy.gpu_capacity.on_insufficient is OnInsufficientCapacity.WAIT
        control = None if intent is None else intent.missing_control() if missing else intent.control()
        snapshot, raw_nodes = take(self.api, self.settings, cache, self.fresh_reads, room, control)
        self.fresh_reads = False
        snapshot.carry = self.carry
        if intent is not None and missing is None:
            intent.judge(snapshot, self.adopt)
            snapshot.control = intent.control()
            if intent.in_force is None:  # no valid spec ever: only the object's status is written
                return self._status_only(intent)
        # The object gone: the nodes in progress finish, and no node is left with our pending taint.
        policy = self.policy.model_copy(update={"taint_pending_nodes": TaintPendingNodes()}) if missing else self.policy
        if self.alerts is not None:
            snapshot.alerts = self.alerts.read()  # no retry inside the pass: the next pass asks again
        observe = cache.observe if cache is not None else None
        applier = Applier(self.api, self.settings, raw_nodes, now, observe, self.events, intent is None)
        writer = _Writer(self, applier)
        preflight = self.preflight.read(snapshot, self.policy) if self.preflight is not None else None
        result = reconcile(snapshot, policy, now, writer.apply, preflight)
        if not writer.closed:
            self._notify(snapshot.control.previous, result.status)
        if intent is not None and missing is None and writer.may_write():
            try:
                intent.write(result.status, rfc3339(now))
            except ApiError as exc:
                writer.errors.append(f"status of {intent.label}: {exc}")
        if self.freeze_heap and cache is not None and cache.synced:
            freeze_heap()
            self.freeze_heap = False
        return PassReport(
            acted=not writer.closed,
            status=result.status,
            outcomes=result.outcomes,
            transitions=result.transitions,
            leader=not writer.closed or writer.stale is not None,  # closed and not stale: lost
            stale=writer.stale,
            error="; ".join(writer.errors) or None,  # a denied or failed write counts as a failed pass
            missing=missing,
        )

    def _notify(self, previous: RolloutStatus | None, status: RolloutStatus) -> None:
        """Hand the pass's notices to the notifier (started with the first): never waits on a receiver."""
        hooks = self.policy.notifications.webhooks
        if not hooks:
            return
        pools = {p.name: p for p in self.policy.pools}
        staged = {e.name: staged_canary(self.policy.for_pool(pools.get(e.name)), e) for e in status.pools or ()}
        found = notices(previous, status, staged_canary(self.policy, status), staged)
        if not found:
            return
        if self.notifier is None:
            where = self.intent.label if self.intent is not None else self.settings.namespace
            self.notifier = Notifier(where)
        self.notifier.tell(hooks, found, status)

    def _status_only(self, intent: RolloutIntent) -> PassReport:
        """The pass of a rollout whose spec was never valid: its status says why, nothing else moves."""
        writer = _Writer(self, Applier(self.api, self.settings, {}, self.clock()))
        if writer.may_write():
            intent.write(None, rfc3339(self.clock()))
        return PassReport(acted=not writer.closed, error=intent.problem)

    def run(self, stop: threading.Event, wake: threading.Event | None = None) -> None:
        """Reconcile until `stop` is set: on `wake` (watch events) or every requeue interval; after a
        failed pass, backing off (see `_rest`)."""
        wake = wake or threading.Event()
        backoff = Backoff(self.settings.requeue_seconds, rng=self.rng)
        while not stop.is_set():
            self.api.last_away = None
            report = self.reconcile()
            if self._rest(self._failed(report), backoff, stop, wake):
                break
        if self.elector is not None:
            self.elector.release()

    def _failed(self, report: PassReport) -> bool:
        """Whether the pass failed; an API server away (unreachable, refusing) is said once per change."""
        away = self.api.last_away if report.result in ("error", "stale_lease") else None
        if away is not None:
            self.api.reachability.failed("reconcile loop", away)
        else:
            self.api.reachability.answered("reconcile loop")
        return away is not None  # a pass that erred on an answer (a refused write) keeps the pace: its Lease needs it

    def _rest(self, failed: bool, backoff: Backoff, stop: threading.Event, wake: threading.Event) -> bool:
        """Wait before the next pass; True when `stop` was set meanwhile.

        After a pass that went through: at least `min_pass_interval_seconds` (events meanwhile keep
        `wake` set: the next pass takes them all), then until `wake` or `requeue_seconds`. After a
        failed pass: backing off, from `requeue_seconds` doubling to BACKOFF_CAP_SECONDS with jitter
        (never shorter than the pause), without waking for events; a pass that goes through resets it.
        """
        pause = min(self.settings.min_pass_interval_seconds, self.settings.requeue_seconds)
        if failed:
            stopped = self.wait(stop, max(pause, backoff.next()))
            wake.clear()
            return stopped
        backoff.reset()
        if pause and self.wait(stop, pause):
            return True
        self.wait(wake, self.settings.requeue_seconds - pause)
        wake.clear()
        return stop.is_set()
