"""An in-process client to the emulator where every request takes seconds of virtual time.

Half the delay passes before the API server handles the request and half before the answer
arrives, so a write lands at a different moment than it was sent and than its answer is read.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client as k8s

from upgrader.core.model.timefmt import parse_rfc3339
from upgrader.kube.api import KubeApi
from upgrader.kube.leader import LeaderElector
from upgrader.sim.cluster import EmulatedCluster


class SlowApi:
    """`delay(method, path)` seconds per request; `fail(method, path)` makes it time out instead."""

    def __init__(self, cluster: EmulatedCluster, low: float = 1.0, high: float = 2.0, seed: int = 0) -> None:
        self.cluster = cluster
        rng = random.Random(seed)
        self.delay: Callable[[str, str], float] = lambda method, path: rng.uniform(low, high)
        self.fail: Callable[[str, str], bool] = lambda method, path: False
        self.sent = 0

    def client(self) -> k8s.ApiClient:
        client = self.cluster.client()
        rest = client.rest_client
        handle = rest.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            path = urllib3.util.parse_url(url).path or ""
            delay = self.delay(method, path)
            self.sent += 1
            self.cluster.advance(delay / 2)
            if self.fail(method, path):
                self.cluster.advance(delay / 2)
                raise urllib3.exceptions.ReadTimeoutError(None, url, "Read timed out (injected)")  # type: ignore[arg-type]
            try:
                return handle(method, url, *args, **kwargs)
            finally:
                self.cluster.advance(delay / 2)

        rest.request = request
        return client

    def api(self) -> KubeApi:
        return KubeApi(self.client(), sleep=lambda _: None)


def elector(api: KubeApi, cluster: EmulatedCluster, identity: str = "me", duration: float = 15) -> LeaderElector:
    return LeaderElector(api, "gpu-operator", "gpu-driver-upgrader", identity, duration, cluster.store.clock.now)


WRITES = ("create", "patch", "update", "delete")


def write_ages(cluster: EmulatedCluster, identity: str) -> list[float]:
    """For each write to anything but the Lease, how old `identity`'s last acknowledged renewal (its
    renewTime, as other replicas judge expiry by) was when the API server handled the write."""
    renewed, ages = float("-inf"), []
    for r in cluster.requests:
        if r.verb not in WRITES:
            continue
        if r.resource == "leases":
            spec = (r.body or {}).get("spec") or {}
            if r.status < 300 and spec.get("holderIdentity") == identity:
                renewed = parse_rfc3339(spec["renewTime"])
        else:
            ages.append(r.time - renewed)
    return ages
