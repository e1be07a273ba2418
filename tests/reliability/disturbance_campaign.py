"""The disturbance campaign: people, spec patches with another domain order, latency and restores
around in-process controllers that follow the DriverRollout object, an operator following the
runbooks, and `check_disturbed` judging each rollout."""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from upgrader.controller.intent import RolloutIntent
from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.preflight_source import PreflightFiles
from upgrader.controller.runner import attach_rollout, build_controller, start_watches
from upgrader.controller.settings import Settings
from upgrader.core.model.states import (
    IN_PROGRESS,
    REQUESTED_ANNOTATION,
    SINCE_STATE,
    STATE_LABEL,
    STATE_SINCE,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.model.views import Snapshot
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.sim.apiserver.backup import Backup
from upgrader.sim.apiserver.errors import ApiError
from upgrader.sim.apiserver.faults import FaultPlan
from upgrader.sim.proving.recording import ZONE_LABEL

from .campaign_world import ORDER, POLICY, ROLLOUT, TRAINING, Figures, World, wait_for, world
from .promotion import pool_parts
from .writers_and_clocks import GONE, KINDS, OtherWriters, split_incidents

DISTURBANCES = ("order change", "zone relabel", "state set by hand", "bogus state label", "record removed",
                "admin cordon", "admin uncordon", "latency", "API server restored", *KINDS)
DISTURBED_LEASE_SECONDS = 6.0  # renewals delayed by seconds of latency still leave time to act
LAG = 2.5  # how far a controller's watch-fed copy may trail the API server (latency up to 2 s)


@dataclass
class Latency(FaultPlan):
    """`share` of the requests answered `low`..`high` seconds late; nothing faulted."""

    share: float = 0.4
    low: float = 0.5
    high: float = 2.0
    delayed: int = 0

    def draw(self, verb: str) -> tuple[str | None, float]:
        with self._lock:
            roll, delay = self._rng.random(), self._rng.uniform(self.low, self.high)
            if roll >= self.share:
                return None, 0.0
            self.delayed += 1
        return None, delay


def ordered_policy(order: list[str]) -> dict[str, Any]:
    """The campaign policy with `order` (its first domain the canary), and a maxUnavailable that
    an admin's cordon, a failed or a `bogus` node makes bind."""
    return {**POLICY, "maxUnavailable": 2, "failureDomains": {"order": order, "soakSeconds": 1, "canaryNodes": 1},
            "pools": [TRAINING]}


class InProcessController:
    """One controller at a time, in process over HTTP, as `run --rollout default` builds it: its policy
    is the object's spec, and a spec change takes effect at its next pass, no restart. Each pass tells
    the recorder when it reads the cluster, and which policy it acts on once it has judged the spec."""

    def __init__(self, w: World, name: str) -> None:
        self.w, self.name, self.starts = w, name, 0
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.failures: list[str] = []

    def start(self, skew: float = 0.0) -> None:
        """Start on the object; `skew`: seconds this replica's wall clock is ahead of the API server's."""
        self.starts += 1
        settings = Settings(requeue_seconds=0.1, identity=f"{self.name}-{self.starts}",
                            lease_duration_seconds=DISTURBED_LEASE_SECONDS)
        controller = build_controller(k8s.ApiClient(k8s.Configuration(host=self.w.url)), Policy(), settings)
        if skew:  # this replica's machine: its clock is off; what it reads from the API server is not
            controller.api.server_clock.local = lambda: time.time() + skew
        self._time_passes(controller)
        self._tell_policies(controller, attach_rollout(controller, ROLLOUT))
        self.stop_event, self.wake = threading.Event(), threading.Event()
        start_watches(controller, self.stop_event, self.wake)
        self.thread = threading.Thread(target=controller.run, args=(self.stop_event, self.wake), daemon=True)
        self.thread.start()

    def _time_passes(self, controller: Controller) -> None:
        # The pass proper (after the lease): its snapshot is read from here on.
        original = controller._pass

        def timed() -> PassReport:
            self.w.recorder.pass_begins()
            return original()

        controller._pass = timed  # type: ignore[method-assign]

    def _tell_policies(self, controller: Controller, intent: RolloutIntent) -> None:
        """After each pass has judged the spec (only the leader's passes do, before deciding anything),
        the policy it acts on is the one in effect: a generation it adopted, or a standby's own at its
        first pass as leader. Not at start: a standby's policy is not in effect while another leads."""
        original = intent.judge

        def judged(snapshot: Snapshot, adopt: Callable[[Policy, PreflightFiles], None]) -> None:
            original(snapshot, adopt)
            self.w.acted_on(controller.policy)

        intent.judge = judged  # type: ignore[method-assign]

    def stop(self) -> None:
        if self.thread is not None and not self.thread.is_alive():  # a traceback on stderr says why
            self.failures.append(f"controller {self.name}-{self.starts} died")
        self.stop_event.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout=60)
            if self.thread.is_alive():  # two controllers at once would void the audit's premise
                self.failures.append(f"controller {self.name}-{self.starts} did not stop within 60 s")


class Disturber(OtherWriters):
    """People and failures around one rollout: the hand edits, restarts, latency and restores of
    issue 11 and the other writers and clocks of issue 23 (OtherWriters), at seeded random moments, and
    an operator who follows the runbooks for the named states they leave (a cordon-record block, a
    state label moved by someone else, a `bogus` label listed as invalid, GPU pods a drain fallback
    left behind, a failure to acknowledge and one that does not recover by itself, cordons that hold
    the whole budget)."""

    def __init__(self, w: World, controller: InProcessController, rng: random.Random, figures: Figures,
                 order: list[str]) -> None:
        self.w, self.controller, self.rng, self.figures = w, controller, rng, figures
        self.order = order
        self.backups: list[tuple[float, Backup, int]] = []
        self.later: list[tuple[float, str, str]] = []  # (when, what, node): an admin's ticket closing
        self.closed: set[str] = set()  # nodes whose tickets were closed
        self.latency: Latency | None = None
        self.latency_until = 0.0
        self.bogus_prior: dict[str, str | None] = {}
        self.noticed: dict[tuple[str, str], float] = {}
        self.init_other_writers()

    def set_order(self) -> None:
        """The platform engineer's `kubectl patch` of the object's domain order: no restart."""
        with self.w.recorder.by_hand("platform engineer"):
            self.w.patch_spec({"failureDomains": {"order": self.order}})

    # ----- the disturbances ------------------------------------------------------------------------

    def backup(self) -> None:
        with self.w.cluster.store.lock:
            backup = self.w.cluster.backup()
            self.backups = [*self.backups[-15:], (time.monotonic(), backup, self.w.recorder.backup_taken())]

    def disturb(self, kind: str) -> bool:
        """Apply one disturbance of `kind`; False when nothing fits it right now."""
        rng, nodes = self.rng, self.w.info.nodes
        in_progress = [n for n in nodes if self.label(n) in {s.value for s in IN_PROGRESS}]
        if kind in KINDS:
            if not getattr(self, KINDS[kind])():
                return False
        elif kind == "order change":
            # Not while a standby waits, as when a change meant a restart: a standby's policy, read at its
            # start, is told to the audit only at its first pass as leader.
            if self.standby is not None:
                return False
            self.order = list(rng.choice([o for o in itertools.permutations(ORDER) if list(o) != self.order]))
            self.set_order()
        elif kind == "zone relabel":
            name = rng.choice(nodes)
            zone = ((self.node(name).get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL)
            other = rng.choice([z for z in ORDER if z != zone])
            self.patch("admin", name, {"metadata": {"labels": {ZONE_LABEL: other}}})
        elif kind == "state set by hand":
            late = {State.POD_RESTART_REQUIRED.value, State.VALIDATION_REQUIRED.value, State.UNCORDON_REQUIRED.value}
            choices = [(n, State.UPGRADE_REQUIRED.value) for n in in_progress]  # its cycle starts again
            choices += [(n, State.DONE.value) for n in in_progress if self.label(n) in late]  # validated, uncordoned
            choices += [(n, State.UPGRADE_REQUIRED.value) for n in nodes if self.label(n) == State.FAILED.value]
            if not choices:
                return False
            name, value = rng.choice(choices)
            self.patch("admin", name, {"metadata": {"labels": {STATE_LABEL: value}}})
        elif kind == "bogus state label":
            name = rng.choice([n for n in nodes if self.label(n) != "bogus"])
            self.bogus_prior[name] = self.label(name)
            self.patch("admin", name, {"metadata": {"labels": {STATE_LABEL: "bogus"}}})
        elif kind == "record removed":
            choices = [(n, key) for n in nodes for key in (WAS_UNSCHEDULABLE, STATE_SINCE)
                       if key in ((self.node(n).get("metadata") or {}).get("annotations") or {})]
            if not choices:
                return False
            name, key = rng.choice(choices)
            self.patch("admin", name, {"metadata": {"annotations": {key: None}}})
        elif kind == "admin cordon":  # a hardware ticket, in any state: the admin uncordons when it is closed
            free: dict[str, list[str]] = {}
            for n in nodes:
                if not self.cordoned(n):
                    free.setdefault(str(self.label(n)), []).append(n)
            if not free:
                return False
            state = rng.choice(sorted(free))
            name = rng.choice(free[state])
            self.figures.counts[f"admin cordon in {state}"] += 1
            self.patch("admin", name, {"spec": {"unschedulable": True}})
            # Some tickets outlast the node's upgrade: only the rollout's end closes them (one at a
            # time, or their cordons would leave no budget to start a node that is not cordoned).
            long = rng.random() < 0.5 and all(when < math.inf for when, *_ in self.later)
            closes = math.inf if long else time.monotonic() + rng.uniform(2.0, 6.0)
            self.later.append((closes, "ticket closed", name))
        elif kind == "admin uncordon":
            busy = [n for n in in_progress if self.cordoned(n)]
            if not busy:
                return False
            self.patch("admin", rng.choice(busy), {"spec": {"unschedulable": None}})
        elif kind == "latency":
            if self.latency is not None:
                return False
            self.latency = Latency(seed=rng.randrange(1 << 30))
            self.latency_until = time.monotonic() + rng.uniform(3.0, 8.0)
            self.w.cluster.faults = self.latency
        elif kind == "API server restored":
            now = time.monotonic()
            old = [b for b in self.backups if 2.0 <= now - b[0] <= 15.0]
            if not old:
                return False
            _, backup, token = rng.choice(old)
            how = rng.choice(["wait", "gone", "too-large", "bump"])
            with self.w.recorder.restoring(token):
                if how == "bump":
                    self.w.cluster.restore_from(backup, bump_revision=rng.randint(100, 10_000))
                else:
                    self.w.cluster.restore_from(backup, future_watches=how)
            self.figures.counts[f"restores ({how})"] += 1
            self.after_restore()
            # The object came back with the backup too: an older domain order is set again, as the
            # operator sets the pause again (GitOps would); the audit follows what the passes adopt.
            order = ((self.w.rollout().get("spec") or {}).get("failureDomains") or {}).get("order")
            if order != self.order:
                self.set_order()
                self.figures.counts["platform engineer: order set again after a restore"] += 1
            # An admin whose ticket was closed uncordons again what the older state cordons again.
            reopened = (self.closed - {n for *_, n in self.later}) & self.w.recorder.foreign_cordons(set(nodes))
            for name in sorted(reopened):
                self.patch("admin", name, {"spec": {"unschedulable": None}})
                self.figures.counts["admin: cordon a restore brought back lifted again"] += 1
        self.figures.counts[kind] += 1
        return True

    def tick(self, closing: bool = False, ended: bool = False) -> None:
        """What is due: the end of a latency stretch (any, when `closing` the disturbances), admins'
        tickets closing (the long ones only once the rollout `ended`), and the operator's part."""
        now = time.monotonic()
        if self.latency is not None and (closing or now >= self.latency_until):
            self.figures.counts["requests delayed"] += self.latency.delayed
            self.w.cluster.faults, self.latency = None, None
        for item in [i for i in self.later if (closing and i[0] < math.inf) or ended or i[0] <= now]:
            self.later.remove(item)
            self.closed.add(item[2])
            if self.cordoned(item[2]):
                self.patch("admin", item[2], {"spec": {"unschedulable": None}})
        self.run_due(now, closing)
        self.operate(now)

    def operate(self, now: float) -> None:
        """The operator reads `upgrader status` and does what the runbook says, a while after first
        seeing each thing (a person, not a reflex; a failure first gets the time to recover by itself)."""
        status = self.w.status()
        seen: dict[tuple[str, str], tuple[float, str]] = {}
        for blocked in status.get("blocked") or []:
            if blocked.get("kind") == "cordon-record":
                seen[("cordon-record", blocked["node"])] = (self.rng.uniform(0.5, 2.0), "")
            elif blocked.get("kind") == "state-label":
                seen[("state-label", blocked["node"])] = (self.rng.uniform(0.5, 2.0), "")
            elif blocked.get("kind") == "gpu-pods":  # GPU pods a drain fallback left (PDB refusals)
                seen[("gpu-pods", blocked["node"])] = (5.0, blocked.get("reason", ""))
        for invalid in status.get("invalid") or []:
            if self.label(invalid["node"]) == "bogus":
                seen[("bogus", invalid["node"])] = (self.rng.uniform(0.5, 2.0), "")
        for failed in status.get("failed") or []:
            seen[("failed", failed["node"])] = (20.0, "")
            if not failed.get("acknowledged"):
                seen[("acknowledge", failed["node"])] = (self.rng.uniform(0.5, 2.0), "")
        if str(status.get("message", "")).startswith("maxUnavailable") and not status.get("in_progress"):
            seen[("budget", "")] = (10.0, "")  # runbooks/rollout-halted.md 6: cordons hold the budget
        self.noticed = {k: v for k, v in self.noticed.items() if k in seen}
        for key, (delay, reason) in seen.items():
            if now < self.noticed.setdefault(key, now + delay):
                continue
            del self.noticed[key]
            self.resolve(*key, reason)

    def resolve(self, what: str, name: str, reason: str) -> None:
        """What the runbook for `what` on node `name` says to do."""
        if what == "cordon-record":  # runbooks/cordon-record-missing.md: say whose the cordon is
            whose = "true" if name in self.w.recorder.foreign_cordons(set(self.w.info.nodes)) else "false"
            self.patch("operator", name, {"metadata": {"annotations": {WAS_UNSCHEDULABLE: whose}}})
        elif what == "state-label":  # runbooks/state-label-moved.md 2: set back the state upgrader set
            since = ((self.node(name).get("metadata") or {}).get("annotations") or {}).get(SINCE_STATE)
            self.patch("operator", name, {"metadata": {"labels": {STATE_LABEL: since}}})
        elif what == "acknowledge":  # runbooks/upgrade-failed-recovery.md, from a laptop whose clock is off
            if not self.cli("acknowledge", name, refusals=GONE):
                what = "acknowledge refused: recovered meanwhile"
        elif what == "bogus" and self.label(name) == "bogus":  # set back what it was, as its Events say
            self.patch("operator", name, {"metadata": {"labels": {STATE_LABEL: self.bogus_prior.get(name)}}})
        elif what == "failed" and self.label(name) == State.FAILED.value:
            # runbooks/upgrade-failed-recovery.md, validation-failure.md: it did not recover; retry it.
            self.patch("operator", name, {"metadata": {"annotations": {REQUESTED_ANNOTATION: "true"},
                                                       "labels": {STATE_LABEL: State.UPGRADE_REQUIRED.value}}})
        elif what == "budget":  # nothing moves: the admins close their tickets, cordons nobody needs go
            if any(when == math.inf for when, *_ in self.later):
                self.later = [(min(when, 0.0), why, node) for when, why, node in self.later]
            else:
                held = {node for *_, node in self.later}
                idle = {State.UPGRADE_REQUIRED.value, State.DONE.value}
                for node in self.w.info.nodes:
                    if node not in held and self.cordoned(node) and self.label(node) in idle:
                        self.patch("operator", node, {"spec": {"unschedulable": None}})
        elif what == "gpu-pods":  # runbooks/gpu-pods-still-running.md: their owners delete them
            pods = self.w.cluster.type("pods")
            for key in re.findall(r"([a-z0-9-]+/[a-z0-9.-]+[a-z0-9])", reason.split(";")[0]):
                namespace, pod = key.split("/")
                with contextlib.suppress(ApiError):
                    self.w.cluster.store.delete(pods, namespace, pod)
        else:
            return
        self.figures.counts[f"operator: {what}"] += 1


def spec_in_force(w: World, order: list[str]) -> list[str]:
    """At the end, the object's newest spec is in force and the audit judged by it: every change a
    pass adopted was told to the recorder (a spec the controller ignored would void the audit)."""

    def caught_up() -> bool:
        obj = w.rollout()
        return (obj.get("status") or {}).get("specInForceGeneration") == obj["metadata"].get("generation")

    if not wait_for(caught_up, 15):
        obj = w.rollout()
        return [f"generation {obj['metadata'].get('generation')} of the spec not in force at the end: "
                f"{(obj.get('status') or {}).get('specInForceGeneration')}"]
    if w.policy_marked is None or list(w.policy_marked.failure_domains.order) != order:
        return [f"the audit's last policy has the order {w.policy_marked and w.policy_marked.failure_domains.order}, "
                f"the spec {order}"]
    return []


def disturbance_campaign(tmp: Path, rollouts: int, seed: int, disturb_seconds: float = 20.0) -> Figures:
    """Rollouts disturbed for `disturb_seconds` each, every one of DISTURBANCES at least once (in a
    seeded order), then more drawn at random: spec patches of the domain order (no restart), zone relabels,
    state labels set by hand (another state, or `bogus`), records removed, an admin's cordon and
    uncordon, seconds of API latency, the API server restored from an older backup. An operator
    answers what the runbooks ask. Each rollout must end with every node upgrade-done and
    `check_disturbed` finding no broken promise."""
    figures = Figures(f"disturbance campaign (seed {seed})")
    started = time.monotonic()
    for index in range(rollouts):
        rng = random.Random(seed * 1000 + index)
        first = policy_from_mapping(ordered_policy(ORDER))
        w = world(tmp, seed=seed + index, spec=ordered_policy(ORDER))
        controller = InProcessController(w, f"disturbed-{index}")
        controller.start()
        disturber = Disturber(w, controller, rng, figures, list(ORDER))
        try:
            plan = rng.sample(DISTURBANCES, len(DISTURBANCES))
            deadline = time.monotonic() + disturb_seconds
            # A slow machine gets through fewer rounds: kinds not applied yet get up to three times as long.
            while time.monotonic() < deadline or (plan and time.monotonic() < deadline + 3 * disturb_seconds):
                disturber.backup()
                pause = time.monotonic() + rng.uniform(0.8, 2.5)
                while time.monotonic() < pause:
                    disturber.tick()
                    time.sleep(0.1)
                kind = plan[0] if plan else rng.choice(DISTURBANCES)
                if disturber.disturb(kind) and plan:
                    plan.pop(0)
                elif plan:  # nothing fits it now: try it again later
                    plan.append(plan.pop(0))
            figures.counts["kinds never applied"] += len(plan)
            figures.counts.update(f"never applied: {kind}" for kind in plan)  # which, for whoever reads a failure
            disturber.tick(closing=True)

            def finished(d: Disturber = disturber) -> bool:
                d.tick()
                return d.w.all_done()

            if not wait_for(finished, 150):
                states = {n: disturber.label(n) for n in w.info.nodes}
                figures.violations.append(f"rollout {index}: did not finish ({w.phase()}: "
                                          f"{w.status().get('message')}; {states})")
            figures.counts["nodes left cordoned by an admin's open ticket"] += sum(
                1 for *_, name in disturber.later if disturber.cordoned(name))
            figures.violations += [f"rollout {index}: {v}" for v in spec_in_force(w, disturber.order)]
        finally:
            disturber.tick(closing=True, ended=True)
            for replica in disturber.replicas:
                if not replica.stop_event.is_set():
                    replica.stop()
            w.cluster.stop()
        # Pool by pool (the fleet's split as the controller makes it): each judged by its own policy.
        audits = [(name, w.recorder.check_disturbed(first, set(nodes), lag=LAG, pool=name or None))
                  for name, _, nodes in pool_parts(first, w.cluster, w.info.nodes)]
        found = [f"pool {name}: {v}" if name else v for name, audit in audits for v in audit.violations]
        if found:  # what led to them, for whoever reads the failure
            dump = tmp / f"history-{seed}-{index}.txt"
            dump.write_text("\n".join(map(str, w.recorder._history())))
            found.append(f"the recorded history: {dump}")
        found += w.promoter.violations(w) if w.promoter is not None else []
        replicas = [f for replica in disturber.replicas for f in replica.failures]
        figures.violations += [f"rollout {index}: {v}" for v in found + replicas]
        figures.violations += [f"rollout {index}: {v}" for v in disturber.other_writer_violations(LAG)]
        ours, kubernetes = split_incidents(w.cluster.daemonsets.incidents)
        figures.violations += [f"rollout {index}: incident: {i}" for i in ours]
        figures.counts["driver restarts Kubernetes made under RollingUpdate"] += kubernetes
        figures.counts["judged on the world before a disturbance"] += sum(len(a.excused) for _, a in audits)
        adopted = [m.policy.failure_domains.order for m in w.recorder.marks if m.kind == "policy" and m.policy]
        figures.counts["domain orders a pass put in force"] += sum(1 for a, b in itertools.pairwise(adopted) if a != b)
        figures.counts.update(w.paths())
        figures.rollouts += 1
    figures.seconds = time.monotonic() - started
    return figures
