"""Wire a controller to a cluster: API client, settings, leader election, watches, signals."""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

from kubernetes import client as k8s

from upgrader import __version__
from upgrader.config import Settings
from upgrader.controller import Controller
from upgrader.core.policy import Policy
from upgrader.kube.api import KubeApi
from upgrader.kube.leader import LeaderElector
from upgrader.kube.waker import Waker

log = logging.getLogger("upgrader")


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


def start_watches(controller: Controller, stop: threading.Event, wake: threading.Event) -> Waker:
    settings = controller.settings
    waker = Waker(
        controller.api,
        [
            ("/api/v1/nodes", None),
            (f"/api/v1/namespaces/{settings.driver_namespace}/pods", settings.driver_pod_selector),
        ],
        wake,
        stop,
    )
    waker.start()
    return waker


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
