"""`Controller.run` paces passes: a burst of watch events is taken by one pass, and the requeue timer
still runs a pass when nothing happens."""

from __future__ import annotations

import itertools
import threading
import time

from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import Policy
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build


def running(settings: Settings) -> tuple[Controller, list[float], threading.Event, threading.Event, threading.Thread]:
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy")
    controller = Controller(KubeApi(cluster.client(), sleep=lambda _: None), Policy(), settings, time.time)
    passes: list[float] = []
    controller.on_pass.append(lambda _report: passes.append(time.monotonic()))
    stop, wake = threading.Event(), threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop, wake), daemon=True)
    thread.start()
    return controller, passes, stop, wake, thread


def test_a_burst_of_events_runs_one_pass_per_interval() -> None:
    interval = 0.3
    _, passes, stop, wake, thread = running(
        Settings(identity="pacing", min_pass_interval_seconds=interval, requeue_seconds=30)
    )
    started = time.monotonic()
    while time.monotonic() - started < 1.5:  # a node status update every 10 ms
        wake.set()
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert len(passes) >= 2, "events do wake the loop"
    assert len(passes) <= 2 + elapsed / interval, f"{len(passes)} passes in {elapsed:.2f} s"
    gaps = [b - a for a, b in itertools.pairwise(passes)]
    assert min(gaps) >= interval * 0.9


def test_without_events_the_requeue_timer_runs_passes() -> None:
    _, passes, stop, _, thread = running(
        Settings(identity="pacing", min_pass_interval_seconds=0.1, requeue_seconds=0.3)
    )
    time.sleep(1.0)
    stop.set()
    thread.join(timeout=10)
    assert 2 <= len(passes) <= 5


def test_stop_during_the_pause_ends_the_loop_at_once() -> None:
    _, passes, stop, _, thread = running(
        Settings(identity="pacing", min_pass_interval_seconds=20, requeue_seconds=30)
    )
    while not passes:
        time.sleep(0.01)
    asked = time.monotonic()
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - asked < 2
