"""The preflight's registry check against a real registry (docker-registry, images pushed by skopeo):
an OCI distribution HEAD per precompiled tag, the anonymous bearer-token exchange public registries
use, pull-secret credentials, a cache with a TTL, and an unreachable registry holding the node
(docs/policy.md#preflight). The last test runs the missing-image scenario with the check on."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.registry_tools import RealRegistry, TokenService
from tests.shown import shown
from upgrader.controller.loop import Controller
from upgrader.controller.preflight_source import PreflightSource
from upgrader.controller.registry import Registry, docker_credentials, split_reference
from upgrader.controller.settings import Settings
from upgrader.core.fleet.preflight import ABSENT, PRESENT
from upgrader.core.model.states import STATE_LABEL
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.core.policy.preflight_policy import RegistryCheck
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import DRIVER_REPO, NEW_DRIVER, OPERATOR_NS, driver_tag
from upgrader.sim.fleets.scenarios import UNBUILT_KERNEL, build

TAG = driver_tag(NEW_DRIVER, "5.15.0-105-generic")
MISSING = driver_tag(NEW_DRIVER, UNBUILT_KERNEL)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[RealRegistry]:
    reg = RealRegistry(tmp_path)
    reg.start()
    reg.push("nvidia/driver", TAG)
    reg.push("private/driver", TAG)
    yield reg
    reg.stop()


def check(reg: RealRegistry, **extra: Any) -> RegistryCheck:
    return RegistryCheck.model_validate({"plainHttp": [reg.host], "cacheSeconds": 60, **extra})


def test_head_finds_a_pushed_tag_and_not_a_missing_one_and_caches_the_answers(registry: RealRegistry) -> None:
    clock = Clock()
    reg = Registry(check(registry), clock)
    present, absent = f"{registry.host}/nvidia/driver:{TAG}", f"{registry.host}/nvidia/driver:{MISSING}"
    answers = reg.answers([present, absent])
    assert answers[present].verdict == PRESENT
    assert answers[absent].verdict == ABSENT
    url = f"http://{registry.host}/v2/nvidia/driver/manifests/{MISSING}"
    assert answers[absent].detail == f"HEAD {url}: 404 manifest unknown"
    assert reg.asked == 2
    clock.now += 59
    reg.answers([present, absent])
    assert reg.asked == 2, "answered from the cache within cacheSeconds"
    clock.now += 2
    reg.answers([present])
    assert reg.asked == 3, "asked again once the answer is older than cacheSeconds"


def test_an_unreachable_registry_cannot_say_and_is_asked_again_soon(registry: RealRegistry) -> None:
    clock = Clock()
    reg = Registry(check(registry), clock)
    registry.stop()
    ref = f"{registry.host}/nvidia/driver:{TAG}"
    answer = reg.answers([ref])[ref]
    assert answer.verdict == "unknown"
    assert answer.detail == f"registry {registry.host} unreachable: Connection refused"
    clock.now += 16
    registry.start()
    assert reg.answers([ref])[ref].verdict == PRESENT, "an answer it could not give is not kept for cacheSeconds"


def _secret(host: str, user: str, password: str) -> dict[str, Any]:
    config = {"auths": {host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}
    return {
        "metadata": {"namespace": OPERATOR_NS, "name": "pull"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }


def test_the_bearer_token_exchange_anonymous_and_with_a_pull_secret(registry: RealRegistry, tmp_path: Path) -> None:
    tokens = TokenService(tmp_path, public=("nvidia/driver",), users={"robot": "s3cret"})
    serving = tokens.serve()
    realm = next(serving)
    try:
        registry.start(realm, tokens.cert)
        anonymous = Registry(check(registry), Clock())
        public, private = f"{registry.host}/nvidia/driver:{TAG}", f"{registry.host}/private/driver:{TAG}"
        missing = f"{registry.host}/nvidia/driver:{MISSING}"
        answers = anonymous.answers([public, private, missing])
        assert answers[public].verdict == PRESENT, answers[public].detail
        assert answers[missing].verdict == ABSENT, answers[missing].detail
        assert answers[private].verdict == "unknown"
        assert answers[private].detail == (
            f"registry {registry.host} denied HEAD http://{registry.host}/v2/private/driver/manifests/{TAG} "
            "(401; no pull secret for it)"
        )
        assert {"service": "upgrader-test-registry", "scope": "repository:nvidia/driver:pull"} in [
            r["query"] for r in tokens.requests
        ]
        creds = docker_credentials([_secret(registry.host, "robot", "s3cret")])
        authorised = Registry(check(registry), Clock(), lambda: creds)
        assert authorised.answers([private])[private].verdict == PRESENT
        assert tokens.requests[-1]["user"] == "robot"
        wrong = docker_credentials([_secret(registry.host, "robot", "guess")])
        refused = Registry(check(registry), Clock(), lambda: wrong)
        assert refused.answers([private])[private].detail == "token service " + realm + " answered HTTP 401"
    finally:
        next(serving, None)


def test_image_names_split_as_a_container_runtime_reads_them() -> None:
    assert split_reference("nvcr.io/nvidia/driver:550-x").repository == "nvidia/driver"
    assert split_reference("127.0.0.1:5000/nvidia/driver:t").host == "127.0.0.1:5000"
    hub = split_reference("ubuntu:22.04")
    assert (hub.host, hub.repository, hub.tag) == ("registry-1.docker.io", "library/ubuntu", "22.04")
    assert split_reference("nvidia/cuda:12.4.0-base").repository == "nvidia/cuda"


def test_the_missing_image_scenario_with_the_registry_check_holds_the_node(registry: RealRegistry) -> None:
    """The driver DaemonSets pull from the real registry, which has every image but the odd node's."""
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "missing-image")
    repo = f"{registry.host}/nvidia/driver"
    cluster.settings.registry[repo] = set(cluster.settings.registry[DRIVER_REPO])  # what the kubelet pulls
    for tag in sorted(cluster.settings.registry[repo]):
        if tag != TAG:
            registry.push("nvidia/driver", tag)
    ds_type = cluster.type("daemonsets", "apps")
    for ds in cluster.store.objects(ds_type):
        container = ds["spec"]["template"]["spec"]["containers"][0]
        if container["image"].startswith(DRIVER_REPO):
            container["image"] = container["image"].replace(DRIVER_REPO, repo)
            patch = {"spec": {"template": {"spec": {"containers": [container]}}}}
            cluster.store.patch(ds_type, OPERATOR_NS, ds["metadata"]["name"], "application/strategic-merge-patch+json",
                                patch)
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    policy = policy_from_mapping(
        {"maxParallelUpgrades": 2, "failureDomains": {"canary": "us-east-1a"},
         "preflight": {"registry": {"plainHttp": [registry.host]}}}
    )
    clock = cluster.store.clock.now
    ctl = Controller(api, policy, Settings(identity="virtual"), clock, None, PreflightSource(api, policy, clock))
    status: dict[str, Any] = {}
    for _ in range(120):
        status = shown(ctl.reconcile().status)
        cluster.advance(1.0)
    node = info.missing_image_node
    labels = {n: cluster.get("nodes", n)["metadata"]["labels"][STATE_LABEL] for n in info.domains["us-east-1a"]}
    assert labels == {"gpu-a-01": "upgrade-done", "gpu-a-02": "upgrade-required"}
    held = {h["node"]: h for h in status["held"]}
    assert held[node]["kind"] == "missing-driver-image"
    assert held[node]["reason"].startswith(
        f"the registry has no {repo}:{MISSING} (HEAD http://{registry.host}/v2/nvidia/driver/manifests/{MISSING}: "
        "404 manifest unknown)"
    )
    assert not cluster.get("nodes", node)["spec"].get("unschedulable")
