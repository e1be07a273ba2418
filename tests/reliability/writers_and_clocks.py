"""The disturbances of the promises that hold against other writers and other clocks (issue 23): a
standby replica and the CLI with clocks minutes off, a second upgrade controller moving state labels,
the GPU Operator's interlocks switched on (ClusterPolicy autoUpgrade, a driver DaemonSet rolled by
Kubernetes), a pause whose rollout object's status is wiped, and an admin's cordon in the window
before upgrader's own; with the checks that only they need (docs/operations.md, docs/policy.md)."""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from tests.conftest import required_binary
from upgrader.core.model.states import SINCE_STATE, STATE_LABEL, State
from upgrader.core.policy.rollout_object import GROUP, PLURAL, VERSION
from upgrader.sim.apiserver.errors import ApiError
from upgrader.sim.apiserver.faults import RequestRecord
from upgrader.sim.apiserver.watch import Change
from upgrader.sim.controllers.driver import ROLLED_BY_KUBERNETES
from upgrader.sim.fleets.builders import CLUSTER_POLICY, OPERATOR_NS
from upgrader.sim.proving.invariants import writer_switches

from .campaign_world import ROLLOUT, Figures, World

SKEW_MINUTES = (1.0, 20.0)  # how far off the clocks of the skewed replicas and CLIs are, either way
WRITES = {"create", "patch", "update", "delete"}
UPGRADER_AGENT = "upgrader/"
LAG_SECONDS_SEEN = 3.0  # an interlock is named in status by then (the watches trail by 2.5 s at most)
# What `upgrader acknowledge` refuses when the failure went away meanwhile (a race, not a fault).
GONE = ("is not upgrade-failed", "no node is upgrade-failed")


def skew_seconds(rng: Random) -> float:
    """Minutes ahead or behind, at random."""
    return rng.choice((-1, 1)) * rng.uniform(*SKEW_MINUTES) * 60


class SkewedCli:
    """`upgrader` run as an operator runs it, in its own process, under libfaketime so that the
    machine's clock is minutes off the API server's (`faketime`, Debian's package of that name)."""

    def __init__(self, w: World, rng: Random) -> None:
        self.w, self.rng = w, rng
        self.faketime = required_binary("faketime", "apt-get install faketime", "UPGRADER_REQUIRE_FAKETIME")
        self.skews: list[float] = []
        self.failures: list[str] = []

    def __call__(self, *args: str, refusals: tuple[str, ...] = ()) -> bool:
        """Run `upgrader ARGS`; False when it refused with one of `refusals` (anything else that is not
        exit 0 is a failure of the campaign: a 409 from the controller's status writes meanwhile included,
        which the CLI meets by reading the object again)."""
        skew = skew_seconds(self.rng)
        self.skews.append(skew)
        argv = [self.faketime, "-f", f"{skew:+.0f}", sys.executable, "-m", "upgrader.commands.cli", *args,
                "--kubeconfig", str(self.w.kubeconfig)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ})
        said = (done.stderr or done.stdout).strip()
        if done.returncode == 1 and any(r in said for r in refusals):
            return False
        if done.returncode != 0:
            self.failures.append(f"`upgrader {' '.join(args)}` with the clock {skew:+.0f} s off exited "
                                 f"{done.returncode}: {said[-300:]}")
        return done.returncode == 0


@dataclass
class Window:
    """A stretch in which an interlock (`what`) was on: upgrader may write no node or pod in it,
    from `lag` after it began (the watches' trail) to its end."""

    what: str
    began: float
    ended: float | None = None
    cut: bool = False  # a restore took the cluster back before it: its end is the restore's moment


@dataclass
class Interlocks:
    """The GPU Operator's interlocks a disturbance switched on, and the writes made under them."""

    w: World
    windows: list[Window] = field(default_factory=list)

    def open(self, what: str) -> Window:
        window = Window(what, self.w.cluster.store.clock.now())
        self.windows.append(window)
        return window

    def close(self, window: Window) -> None:
        if window.ended is None:
            window.ended = self.w.cluster.store.clock.now()

    def restored(self) -> None:
        """A restore may take an interlock back off (or on): the windows open now end here."""
        for window in self.windows:
            if window.ended is None:
                window.cut = True
                self.close(window)

    def status_writes(self, window: Window, lag: float) -> list[bool]:
        """For each write of the rollout object's status upgrader made from `lag` after `window` began
        (the status ConfigMap's writes, before the object): whether its report named an interlock."""
        return [bool(written_report(r.body).get("interlocks"))
                for r in self.w.cluster.requests if is_status_write(r) and r.time >= window.began + lag]

    def violations(self, lag: float) -> list[str]:
        """Node and pod writes of passes that read the cluster `lag` or more after an interlock was
        switched on, before it was off again (a pass that read it before finishes its writes)."""
        writes = [r for r in self.w.cluster.requests if writes_a_node_or_pod(r)]
        passes = sorted(m.time for m in self.w.recorder.marks if m.kind == "pass")
        out = []
        for window in self.windows:
            end = window.ended if window.ended is not None else float("inf")
            for r in writes:
                began = passes[bisect.bisect_right(passes, r.time) - 1] if passes and passes[0] <= r.time else None
                if began is not None and window.began + lag <= began and r.time <= end:
                    out.append(f"request {r.seq}: {r.verb} {r.resource}/{r.name} {r.subresource} by {r.user_agent} "
                               f"in a pass begun {began - window.began:.1f} s after {window.what} was switched on: "
                               f"{json.dumps(r.body)[:300]}")
        return out


def written_status(body: Any) -> dict[str, Any]:
    """The status a status write sends: a JSON patch `add /status` (kube/rollout_object.py), or a merge patch."""
    if isinstance(body, list):
        status = next((op.get("value") for op in body if isinstance(op, dict) and op.get("path") == "/status"), None)
    else:
        status = body.get("status") if isinstance(body, dict) else None
    return status if isinstance(status, dict) else {}


def written_report(body: Any) -> dict[str, Any]:
    """The status.report (what the status ConfigMap held) a status write sends."""
    report = written_status(body).get("report")
    return report if isinstance(report, dict) else {}


def is_status_write(r: RequestRecord) -> bool:
    """upgrader's write of the rollout object's status that went through."""
    return (r.resource == PLURAL and r.name == ROLLOUT and r.subresource == "status" and r.verb in WRITES
            and r.user_agent.startswith(UPGRADER_AGENT) and r.status < 300)


def writes_a_node_or_pod(r: RequestRecord) -> bool:
    return r.user_agent.startswith(UPGRADER_AGENT) and r.verb in WRITES and r.resource in ("nodes", "pods")


class LeaseHolders:
    """Counts how often the Lease's holder changed (a restore that brings an older holder back counts):
    node and pod writes may change hands no more often than that."""

    def __init__(self, w: World) -> None:
        self.changes, self._holder = 0, None
        w.cluster.store.reactors.append(self._react)

    def _react(self, change: Change) -> None:
        if change.key == ("coordination.k8s.io", "leases") and change.new is not None:
            holder = (change.new.get("spec") or {}).get("holderIdentity")
            if holder != self._holder:
                self.changes, self._holder = self.changes + 1, holder


class WindowCordon:
    """An admin's cordon in the window between upgrader's start of a node (its label moved to
    cordon-required) and upgrader's own cordon: armed, it lands right after the next such start."""

    def __init__(self, w: World, cordon: object) -> None:
        self.w, self.cordon = w, cordon
        self.armed = False
        self.lock = threading.Lock()
        w.cluster.store.reactors.append(self._react)

    def arm(self) -> bool:
        with self.lock:
            if self.armed:
                return False
            self.armed = True
            return True

    def _react(self, change: Change) -> None:
        if change.key != ("", "nodes") or change.old is None or change.new is None or not self.armed:
            return
        before = (change.old["metadata"].get("labels") or {}).get(STATE_LABEL)
        after = (change.new["metadata"].get("labels") or {}).get(STATE_LABEL)
        if (before, after) != (State.UPGRADE_REQUIRED.value, State.CORDON_REQUIRED.value):
            return
        if (change.new.get("spec") or {}).get("unschedulable"):
            return
        if self.w.recorder.records[-1].by is not None:  # a person's start, not upgrader's
            return
        with self.lock:
            self.armed = False
        name = change.new["metadata"]["name"]
        self.w.cluster.store.timers.after(0.0, f"admin cordons {name}", lambda: self.cordon(name))  # type: ignore[operator]


def cluster_policy_auto_upgrade(w: World, on: bool) -> None:
    policies = w.cluster.type("clusterpolicies", "nvidia.com")
    body = {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": on}}}}
    w.cluster.store.patch(policies, None, CLUSTER_POLICY, "application/merge-patch+json", body)


def driver_update_strategy(w: World, name: str, rolling: bool) -> None:
    daemonsets = w.cluster.type("daemonsets", "apps")
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}} if rolling else {
        "type": "OnDelete", "rollingUpdate": None}
    w.cluster.store.patch(daemonsets, OPERATOR_NS, name, "application/merge-patch+json",
                          {"spec": {"updateStrategy": strategy}})


def split_incidents(incidents: list[str]) -> tuple[list[str], int]:
    """(incidents of upgrader's making, driver restarts Kubernetes made itself under RollingUpdate)."""
    ours = [i for i in incidents if ROLLED_BY_KUBERNETES not in i]
    return ours, len(incidents) - len(ours)



KINDS = {  # disturbance -> the OtherWriters method that applies it
    "standby with a skewed clock": "skewed_standby",
    "pause from a skewed CLI": "pause",
    "rollout status wiped while paused": "wipe_status",  # was: the status or control ConfigMap deleted
    "second controller moves a state label": "second_controller",
    "ClusterPolicy autoUpgrade turned on": "auto_upgrade_on",
    "driver DaemonSet switched to RollingUpdate": "rolling_update",
    "admin cordon before upgrader's own": "window_cordon",
}
NEXT_STATE = {  # the Operator's order of the states in progress, for a second controller to skip along
    State.CORDON_REQUIRED.value: State.WAIT_FOR_JOBS_REQUIRED.value,
    State.WAIT_FOR_JOBS_REQUIRED.value: State.POD_DELETION_REQUIRED.value,
    State.POD_DELETION_REQUIRED.value: State.DRAIN_REQUIRED.value,
    State.DRAIN_REQUIRED.value: State.POD_RESTART_REQUIRED.value,
    State.POD_RESTART_REQUIRED.value: State.VALIDATION_REQUIRED.value,
    State.VALIDATION_REQUIRED.value: State.UNCORDON_REQUIRED.value,
}


class OtherWriters:
    """The Disturber's part for KINDS, and the cluster as kubectl shows it; the Disturber provides `w`,
    `rng`, `figures`, `controller` and `later` (admins' tickets), and calls `run_due` as it ticks and
    `after_restore` after each restore."""

    w: World
    rng: Random
    figures: Figures
    controller: Any
    later: list[tuple[float, str, str]]

    # ----- the cluster as kubectl shows it ---------------------------------------------------------

    def node(self, name: str) -> dict[str, Any]:
        return self.w.cluster.get("nodes", name) or {}

    def label(self, name: str) -> str | None:
        return ((self.node(name).get("metadata") or {}).get("labels") or {}).get(STATE_LABEL)

    def cordoned(self, name: str) -> bool:
        return bool((self.node(name).get("spec") or {}).get("unschedulable"))

    def patch(self, who: str, name: str, body: dict[str, Any]) -> None:
        with self.w.recorder.by_hand(who):
            self.w.cluster.store.patch(self.w.cluster.type("nodes"), None, name, "application/merge-patch+json", body)

    def init_other_writers(self) -> None:
        self.cli = SkewedCli(self.w, self.rng)
        self.interlocks = Interlocks(self.w)
        self.holders = LeaseHolders(self.w)
        self.window = WindowCordon(self.w, self._window_cordon)
        self.window_tickets: list[str] = []  # cordoned in the window, from the emulator's timer thread
        self.undo: list[tuple[float, str, Callable[[], None]]] = []
        self.standby: Any = None
        self.replicas: list[Any] = [self.controller]  # every replica started, to stop and to hear from
        self.paused = self.wiped_in_pause = False
        self.restores = 0
        self.problems: list[str] = []

    def do_later(self, seconds: float, what: str, action: Callable[[], None]) -> None:
        self.undo.append((time.monotonic() + seconds, what, action))

    def run_due(self, now: float, closing: bool) -> None:
        """The follow-ups due (every one, when `closing` the disturbances), and the tickets of cordons
        made in the window."""
        for item in sorted((u for u in self.undo if closing or u[0] <= now), key=lambda u: u[0]):
            if item in self.undo:
                self.undo.remove(item)
                item[2]()
        while self.window_tickets:
            name = self.window_tickets.pop()
            long = self.rng.random() < 0.5 and all(when < math.inf for when, *_ in self.later)
            self.later.append((math.inf if long else now + self.rng.uniform(2.0, 6.0), "ticket closed", name))

    # ----- the disturbances ------------------------------------------------------------------------

    def skewed_standby(self) -> bool:
        """A second replica whose clock is minutes off: it must not take the Lease the leader renews;
        then it stops, or the leader stops and it leads with its clock."""
        if self.standby is not None:
            return False
        skew = skew_seconds(self.rng)
        self.standby = type(self.controller)(self.w, f"skewed-{self.figures.counts['standby with a skewed clock']}")
        self.standby.start(skew=skew)  # on the object, as the leader
        self.replicas.append(self.standby)
        self.figures.counts["replica clock skew, largest (s)"] = max(
            self.figures.counts["replica clock skew, largest (s)"], round(abs(skew)))

        def end() -> None:
            if self.rng.random() < 0.5:
                self.standby.stop()
                self.figures.counts["skewed standby stopped"] += 1
            else:
                self.controller.stop()
                self.controller = self.standby
                self.figures.counts["skewed standby took over from a stopped leader"] += 1
            self.standby = None

        self.do_later(self.rng.uniform(2.0, 6.0), "the standby ends", end)
        return True

    def pause(self) -> bool:
        if self.paused:
            return False
        self.cli("pause")
        self.paused, self.wiped_in_pause = True, False

        def resume() -> None:
            self.cli("resume")
            self.paused = False

        self.do_later(self.rng.uniform(5.0, 9.0), "resume", resume)
        return True

    def wipe_status(self) -> bool:
        """While paused (a pause made first if there is none), the rollout object's status is wiped
        (`kubectl patch driverrollout default --subresource=status --type=json` replacing it with {}):
        the pause holds, being in spec, and the status the controller writes again says Paused. The
        object's analogue of the status or control ConfigMap deleted while paused (moot with the object)."""
        if self.wiped_in_pause:
            return False
        if not self.paused:
            self.pause()
        self.do_later(self.rng.uniform(0.5, 2.0), "wipe the status while paused", self._wipe_while_paused)
        self.wiped_in_pause = True
        return True

    def _wipe_while_paused(self) -> None:
        if not self.paused:
            return
        wipe = [{"op": "replace", "path": "/status", "value": {}}]
        with contextlib.suppress(ApiError), self.w.recorder.by_hand("operator"):
            self.w.cluster.store.patch(self.w.cluster.type(PLURAL, GROUP, VERSION), None, ROLLOUT,
                                       "application/json-patch+json", wipe, subresource="status")
        restores, wiped = self.restores, self.w.cluster.store.clock.now()
        self.figures.counts["rollout status wiped while paused"] += 1

        def check() -> None:
            if not self.paused or self.restores != restores:
                return
            phase = self.phase_written_after(wiped)
            if phase is None:  # not written again yet
                self.do_later(0.5, "check the pause", check)
            elif phase != "Paused":
                self.problems.append(f"rollout status wiped while paused: the status then said {phase}")
            else:
                self.figures.counts["status written again as Paused"] += 1

        self.do_later(1.5, "check the pause", check)

    def phase_written_after(self, moment: float) -> str | None:
        """The phase of the first status written by a pass that began after `moment` (None: none yet).
        A pass that began before the pause may write Running after the wipe (its copy is older, as the
        audit allows its node writes); a replica's passes run one at a time, so a write that came after
        a pass began at or after `moment` is that pass's or a later one's."""
        began = next((m.time for m in self.w.recorder.marks if m.kind == "pass" and m.time >= moment), None)
        if began is None:
            return None
        written = next((r for r in self.w.cluster.requests if is_status_write(r) and r.time >= began), None)
        return None if written is None else str(written_status(written.body).get("phase"))

    def second_controller(self) -> bool:
        """Another upgrade controller (the Operator's, autoUpgrade on) moves a state label: a node
        upgrader started skips along, or an idle one is started without a cordon."""
        started, idle = [], []
        for name in self.w.info.nodes:
            notes = (self.node(name).get("metadata") or {}).get("annotations") or {}
            state = self.label(name)
            if state in NEXT_STATE and notes.get(SINCE_STATE) == state:
                started.append((name, NEXT_STATE[state]))
            elif state == State.UPGRADE_REQUIRED.value and not self.cordoned(name):
                idle.append((name, State.CORDON_REQUIRED.value))
        choices = started if started and (not idle or self.rng.random() < 0.7) else idle
        if not choices:
            return False
        name, state = self.rng.choice(choices)
        self.figures.counts[f"second controller: {self.label(name)} -> {state}"] += 1
        self.patch("gpu-operator", name, {"metadata": {"labels": {STATE_LABEL: state}}})
        return True

    def auto_upgrade_on(self) -> bool:
        return self._interlock("ClusterPolicy autoUpgrade", lambda on: cluster_policy_auto_upgrade(self.w, on))

    def rolling_update(self) -> bool:
        name = self.rng.choice(self.w.info.driver_daemonsets)
        return self._interlock(f"RollingUpdate on {name}", lambda on: driver_update_strategy(self.w, name, on))

    def _interlock(self, what: str, switch: Callable[[bool], None]) -> bool:
        """Switch an interlock on; the operator switches it off a few seconds later, as
        runbooks/install-beside-gpu-operator.md says, once status named it."""
        if any(w.ended is None for w in self.interlocks.windows):
            return False
        window = self.interlocks.open(what)
        switch(True)

        def off() -> None:
            said = self.interlocks.status_writes(window, LAG_SECONDS_SEEN)
            if not window.cut and said and not any(said):
                self.problems.append(f"{what}: {len(said)} status writes, none named the interlock")
            self.figures.counts["interlocks named in status"] += any(said)
            switch(False)
            self.interlocks.close(window)

        self.do_later(self.rng.uniform(LAG_SECONDS_SEEN + 1.0, LAG_SECONDS_SEEN + 4.0), f"{what} off", off)
        return True

    def window_cordon(self) -> bool:
        return self.window.arm()

    def _window_cordon(self, name: str) -> None:
        """On the emulator's timer thread, right after upgrader's start of `name`."""
        if self.cordoned(name) or self.label(name) != State.CORDON_REQUIRED.value:
            self.figures.counts["admin cordon in the window: too late, upgrader's came first"] += 1
            self.window.arm()
            return
        self.patch("admin", name, {"spec": {"unschedulable": True}})
        self.figures.counts["admin cordons in the window before upgrader's own"] += 1
        self.window_tickets.append(name)

    # ----- after a restore, and the checks ---------------------------------------------------------

    def after_restore(self) -> None:
        """A restore can bring an interlock or a pause back from the backup's moment (or take one
        away): the operator notices and sets it as it should be."""
        self.restores += 1
        self.interlocks.restored()
        cluster_policy_auto_upgrade(self.w, False)
        for name in self.w.info.driver_daemonsets:
            driver_update_strategy(self.w, name, False)
        # The pause is in the object's spec, which came back with the backup (the control ConfigMap's, before).
        if ((self.w.rollout().get("spec") or {}).get("paused") is True) != self.paused:
            self.cli("pause" if self.paused else "resume")
            self.figures.counts["operator: pause set again after a restore"] += 1

    def other_writer_violations(self, lag: float) -> list[str]:
        switches = writer_switches(self.w.cluster)
        found = [*self.problems, *self.cli.failures, *self.interlocks.violations(lag)]
        if switches > self.holders.changes:
            found.append(f"node and pod writes changed hands {switches} times, the Lease {self.holders.changes}")
        self.figures.counts["CLI runs with a skewed clock"] += len(self.cli.skews)
        if self.cli.skews:
            self.figures.counts["CLI clock skew, largest (s)"] = max(
                self.figures.counts["CLI clock skew, largest (s)"], round(max(map(abs, self.cli.skews))))
        return found
