"""Shared fixtures for the emulator tests: an emulated cluster and the official client against it.

Most tests run in-process on a virtual clock (`cluster`, `core`, ...): nothing sleeps, time moves
with `cluster.advance()`. The few HTTP tests use `served`, a wall-clock cluster listening on
loopback, and build their own `kubernetes.client.ApiClient` from its URL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as k8s

from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import ScenarioInfo, build

Obj = dict[str, Any]


@pytest.fixture
def cluster() -> EmulatedCluster:
    return EmulatedCluster.virtual()


@pytest.fixture
def api_client(cluster: EmulatedCluster) -> k8s.ApiClient:
    return cluster.client()


@pytest.fixture
def core(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


@pytest.fixture
def apps(api_client: k8s.ApiClient) -> k8s.AppsV1Api:
    return k8s.AppsV1Api(api_client)


@pytest.fixture
def policy(api_client: k8s.ApiClient) -> k8s.PolicyV1Api:
    return k8s.PolicyV1Api(api_client)


@pytest.fixture
def batch(api_client: k8s.ApiClient) -> k8s.BatchV1Api:
    return k8s.BatchV1Api(api_client)


@pytest.fixture
def fleet(cluster: EmulatedCluster) -> Callable[[str], ScenarioInfo]:
    """Build a named scenario into the (virtual-clock) cluster."""

    def make(name: str) -> ScenarioInfo:
        return build(cluster, name)

    return make


@dataclass
class Served:
    """A wall-clock emulator served over HTTP, and an official client configured for its URL."""

    cluster: EmulatedCluster
    url: str

    def api_client(self, **settings: Any) -> k8s.ApiClient:
        config = k8s.Configuration(host=self.url)
        for name, value in settings.items():
            setattr(config, name, value)
        return k8s.ApiClient(config)

    def core(self, **settings: Any) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api_client(**settings))


@pytest.fixture
def served() -> Iterator[Served]:
    cluster = EmulatedCluster()
    url = cluster.serve()
    try:
        yield Served(cluster, url)
    finally:
        cluster.stop()
