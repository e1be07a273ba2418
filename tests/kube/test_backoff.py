"""While the API server is away, `Controller.run` backs off between passes (exponential from the
requeue interval, capped, with jitter; reset by a pass that goes through) and the log says each change
of the API server's condition once: unreachable -> answering 500 -> answering 403 -> reachable again.
On a virtual clock: waits take no time, and the gaps between passes are read from it."""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field

import pytest

from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.runner import Health
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import Policy
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.leader import LeaderElector
from upgrader.kube.reachability import BACKOFF_CAP_SECONDS, Backoff, Reachability
from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.api import Request, Response, encode
from upgrader.sim.apiserver.faults import VERBS, FaultPlan, FaultRates
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

SERVER = "http://emulator.in-process"
FORBIDDEN = 'leases.coordination.k8s.io is forbidden: User "upgrader" cannot get resource "leases"'
CAP = f"retrying with backoff (up to {BACKOFF_CAP_SECONDS:g} s)"


@dataclass
class VirtualTime:
    now: float = 0.0
    passes: list[float] = field(default_factory=list)  # when each pass ended
    reasons: list[str | None] = field(default_factory=list)  # what /readyz could say then
    readyz: list[str | None] = field(default_factory=list)  # what the runner's /readyz says then

    def clock(self) -> float:
        return self.now

    def wait(self, event: threading.Event, seconds: float) -> bool:
        self.now += seconds
        return event.is_set()

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.passes, self.passes[1:], strict=False)]


class Away:
    """The emulator as the API server, made to drop every connection (its fault injection), answer
    500 (likewise) or 403 (no fault kind for that: its dispatcher is wrapped), or answer normally."""

    def __init__(self, cluster: EmulatedCluster) -> None:
        self.cluster = cluster
        self.forbidden = False
        handle = cluster.dispatcher.handle

        def handler(request: Request) -> Response:
            if self.forbidden:
                return Response(403, encode(errors.ApiError(403, FORBIDDEN, reason="Forbidden").body()))
            return handle(request)

        cluster.dispatcher.handle = handler  # type: ignore[method-assign]

    def be(self, condition: str) -> None:
        rates = {"unreachable": FaultRates(drop=1.0), "500": FaultRates(error500=1.0)}.get(condition)
        self.cluster.faults = FaultPlan({verb: rates for verb in VERBS}) if rates else None
        self.forbidden = condition == "403"


def controller_on(vt: VirtualTime, script: list[str], elector: bool = False) -> tuple[Controller, Away]:
    """A controller whose pass n (from 1) meets the API server as `script[n - 1]` says; it stops after
    the last."""
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy")
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    api.reachability.clock = vt.clock
    lease = LeaderElector(api, "gpu-operator", "gpu-driver-upgrader", "me", 15, vt.clock) if elector else None
    controller = Controller(api, Policy(), Settings(identity="me"), time.time, lease)
    controller.wait, controller.rng = vt.wait, random.Random(7)
    away = Away(cluster)
    stop = threading.Event()
    health = Health(controller, clock=vt.clock)

    def next_pass(report: PassReport) -> None:
        vt.passes.append(vt.now)
        vt.reasons.append(api.reachability.condition())
        vt.readyz.append(health.unready_reason())
        if len(vt.passes) == len(script):
            stop.set()
        else:
            away.be(script[len(vt.passes)])

    controller.on_pass.append(next_pass)
    away.be(script[0])
    controller.run(stop, threading.Event())
    return controller, away


def said(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level and "API server" in r.getMessage()]


def test_the_nth_failure_waits_between_half_and_all_of_the_capped_doubling() -> None:
    for seed in range(50):
        backoff = Backoff(5.0, rng=random.Random(seed))
        waits = [backoff.next() for _ in range(8)]
        for wait, top in zip(waits, [5, 10, 20, 30, 30, 30, 30, 30], strict=True):
            assert top / 2 <= wait <= top
        backoff.reset()
        assert 2.5 <= backoff.next() <= 5, "a success starts over"
    assert len({round(Backoff(5.0).next(), 6) for _ in range(20)}) > 1, "jittered: replicas do not retry in step"


def test_passes_back_off_while_the_api_server_is_away_and_each_change_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    vt = VirtualTime()
    script = ["unreachable"] * 5 + ["500"] * 2 + ["403"] * 2 + ["ok", "ok"]
    with caplog.at_level(logging.DEBUG, logger="upgrader"):
        controller_on(vt, script)
    gaps = vt.gaps()
    ceilings = [5, 10, 20, 30, 30, 30, 30, 30, 30]  # requeue 5 s, doubling, capped at 30 s
    for n, (gap, top) in enumerate(zip(gaps, ceilings, strict=False), start=1):
        assert top / 2 <= gap <= top, f"after failed pass {n}: {gaps}"
    assert gaps[len(ceilings)] == 5.0, "a pass that went through: the usual requeue interval again"
    away_for = vt.passes[9] - vt.passes[0]
    assert said(caplog) == [
        f"API server {SERVER} unreachable: injected dropped connection; {CAP}",
        f"API server {SERVER} answered 500 InternalError: Internal error occurred: injected fault; {CAP}",
        f"API server {SERVER} answered 403 Forbidden: {FORBIDDEN}; {CAP}",
        f"API server {SERVER} reachable again after {away_for:.0f} s",
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 3, warnings


def test_the_reason_is_there_to_read_while_away_and_gone_after() -> None:
    vt = VirtualTime()
    controller_on(vt, ["unreachable"] * 3 + ["ok"])
    first_said = vt.passes[0]  # at the end of the first pass
    assert vt.reasons == [
        None,  # read during the first pass, before the loop said anything
        f"API server {SERVER} unreachable: injected dropped connection (for {vt.passes[1] - first_said:.0f} s)",
        f"API server {SERVER} unreachable: injected dropped connection (for {vt.passes[2] - first_said:.0f} s)",
        f"API server {SERVER} unreachable: injected dropped connection (for {vt.passes[3] - first_said:.0f} s)",
    ], "the reason is the loop's: the pass that answers clears it once it has ended"
    assert vt.readyz[1:3] == vt.reasons[1:3], "/readyz names the API server while it is away"


def test_with_leader_election_an_outage_is_a_handful_of_lines(caplog: pytest.LogCaptureFixture) -> None:
    vt = VirtualTime()
    script = ["ok"] + ["unreachable"] * 10 + ["ok", "ok"]
    with caplog.at_level(logging.INFO, logger="upgrader"):
        controller, _ = controller_on(vt, script, elector=True)
    assert len(vt.passes) == len(script)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings[0] == f"API server {SERVER} unreachable: injected dropped connection; {CAP}"
    assert len(warnings) <= 3, warnings  # the line above, and the lease held but not renewable (once or twice)
    assert [m for m in said(caplog) if "reachable again" in m] == [
        f"API server {SERVER} reachable again after {vt.passes[11] - vt.passes[1]:.0f} s"
    ]
    assert controller.elector is not None and controller.elector.renewed_at is None, "released at the stop"


def test_reporters_in_different_trouble_do_not_make_the_line_flap(caplog: pytest.LogCaptureFixture) -> None:
    vt = VirtualTime()
    reach = Reachability("https://h:6443", clock=vt.clock)
    gone = ApiError(0, "Unreachable", "Connection refused", server="https://h:6443")
    refused = ApiError(403, "Forbidden", "nodes is forbidden", server="https://h:6443")
    with caplog.at_level(logging.INFO, logger="upgrader"):
        for _ in range(5):
            reach.failed("reconcile loop", gone)
            reach.failed("watch /api/v1/nodes", refused)
            vt.now += 10
        reach.answered("reconcile loop")
        reach.answered("reconcile loop")
        reach.answered("watch /api/v1/nodes")
    assert said(caplog) == [
        f"API server https://h:6443 unreachable: Connection refused; {CAP}",
        f"API server https://h:6443 answered 403 Forbidden: nodes is forbidden; {CAP}",
        "API server https://h:6443 reachable again after 50 s",
    ]
