"""Issue 13, "Refuse what it cannot judge": `run` and `demo` check the policy's failure domains against
the cluster at start-up, before their first write (`runner.check_policy_against_cluster`), and a
running controller says in its log when the fleet stops fitting the policy (it goes on)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from pytest_mock import MockerFixture

from upgrader.commands.cli import main
from upgrader.controller import runner
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.inputs import ConfigError
from upgrader.sim.apiserver.faults import FaultPlan, FaultRates
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

ZONES = "(zones: us-east-1a, us-east-1b, us-east-1c)"
CANARY_1Z = f'failureDomains.canary: "us-east-1z" is not the zone of any managed GPU node {ZONES}'


@pytest.fixture(autouse=True)
def _clean_env_and_signals(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("UPGRADER_") or name == "KUBECONFIG":
            monkeypatch.delenv(name)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for number, handler in handlers.items():  # `run` installs its own
        signal.signal(number, handler)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[EmulatedCluster, str]]:
    emulated = EmulatedCluster()
    build(emulated, "healthy")
    emulated.serve()
    kubeconfig = emulated.write_kubeconfig(tmp_path / "kubeconfig")
    try:
        yield emulated, str(kubeconfig)
    finally:
        emulated.stop()


def writes(cluster: EmulatedCluster) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in cluster.requests if r.method != "GET"]


def policy_file(tmp_path: Path, **failure_domains: Any) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"failureDomains": failure_domains}))
    return str(path)


def controller(cluster: EmulatedCluster, **failure_domains: Any) -> Controller:
    """Built as `demo` builds its own."""
    assert cluster.server is not None
    url = f"http://127.0.0.1:{cluster.server.server_address[1]}"
    settings = Settings(requeue_seconds=0.5, identity="upgrader-test", lease_duration_seconds=5)
    policy = policy_from_mapping({"failureDomains": failure_domains})
    return runner.build_controller(k8s.ApiClient(k8s.Configuration(host=url)), policy, settings)


def test_run_refuses_a_misspelt_canary_before_its_first_write(cluster: tuple[EmulatedCluster, str], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    emulated, kubeconfig = cluster
    policy = policy_file(tmp_path, canary="us-east-1z")
    before = len(emulated.requests)
    assert main(["run", "--kubeconfig", kubeconfig, "--policy", policy]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"upgrader: error: policy {policy}: {CANARY_1Z}\n")
    sent = emulated.requests[before:]
    assert sent and {r.method for r in sent} == {"GET"}  # it read the cluster, took no Lease, wrote nothing
    assert writes(emulated) == []


def test_the_start_up_check_reads_only_and_passes_a_fitting_policy(cluster: tuple[EmulatedCluster, str]) -> None:
    emulated, _ = cluster
    runner.check_policy_against_cluster(controller(emulated, canary="us-east-1b", order=["us-east-1c"]))
    with pytest.raises(ConfigError) as refused:
        runner.check_policy_against_cluster(controller(emulated, order=["us-east-1a", "eu-west-1a"]), "x.yaml")
    assert str(refused.value) == (
        f'policy x.yaml: failureDomains.order.1: "eu-west-1a" is not the zone of any managed GPU node {ZONES}')
    assert writes(emulated) == []


def test_the_check_waits_for_a_cluster_it_cannot_read_and_writes_nothing(cluster: tuple[EmulatedCluster, str]) -> None:
    emulated, _ = cluster
    ctl = controller(emulated, canary="us-east-1b")
    ctl.api.attempts = 1
    emulated.faults = FaultPlan({"list": FaultRates(error500=1.0)})
    waits: list[float] = []

    def wait(event: threading.Event, seconds: float) -> bool:
        waits.append(seconds)
        emulated.faults = None  # the API server answers again
        return False

    ctl.wait = wait
    assert runner._check_when_readable(ctl, threading.Event(), None) is True
    assert len(waits) == 1 and writes(emulated) == []
    stopped = threading.Event()
    stopped.set()
    assert runner._check_when_readable(ctl, stopped, None) is False


def test_a_running_controller_says_once_when_the_canary_zone_goes(cluster: tuple[EmulatedCluster, str],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """The canary zone's nodes removed mid-run: no crash, no refusal; one WARNING, and one line when it is back."""
    emulated, _ = cluster
    ctl = controller(emulated, canary="us-east-1a")
    runner.check_policy_against_cluster(ctl)
    caplog.set_level(logging.INFO, logger="upgrader")
    assert ctl.reconcile().error is None
    nodes = emulated.type("nodes")
    for name in ("gpu-a-01", "gpu-a-02"):
        emulated.store.delete(nodes, None, name)
    for _ in range(2):
        assert ctl.reconcile().error is None
    said = [r.getMessage() for r in caplog.records if "fit" in r.getMessage()]
    assert said == [
        'the policy no longer fits the cluster: failureDomains.canary: "us-east-1a" is not the zone of any managed '
        "GPU node (zones: us-east-1b, us-east-1c); the rollout goes on over the domains there are"]
    emulated.store.patch(nodes, None, "gpu-b-01", "application/merge-patch+json",
                         {"metadata": {"labels": {"topology.kubernetes.io/zone": "us-east-1a"}}})
    ctl.reconcile()
    said = [r.getMessage() for r in caplog.records if "fit" in r.getMessage()]
    assert said[1:] == ["the policy fits the cluster again: every failure domain it names has managed GPU nodes"]


# ----- run --once and demo check the same way -----


def test_run_once_refuses_a_misspelt_canary(cluster: tuple[EmulatedCluster, str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    emulated, kubeconfig = cluster
    policy = policy_file(tmp_path, canary="us-east-1z")
    code = main(["run", "--once", "--kubeconfig", kubeconfig, "--policy", policy])
    out, err = capsys.readouterr()
    assert (code, out, err) == (2, "", f"upgrader: error: policy {policy}: {CANARY_1Z}\n")
    assert writes(emulated) == []


def test_demo_refuses_a_canary_its_fleet_has_not(tmp_path: Path, mocker: MockerFixture,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    built = mocker.spy(EmulatedCluster, "__init__")  # the demo's own cluster, to read its requests
    policy = policy_file(tmp_path, canary="us-east-1z")
    code = main(["demo", "--policy", policy, "--timeout", "2"])
    out, err = capsys.readouterr()
    assert (code, out, err) == (2, "", f"upgrader: error: policy {policy}: {CANARY_1Z}\n")
    made: EmulatedCluster = built.call_args_list[-1].args[0]
    assert built.call_count == 1 and not any(r.method != "GET" for r in made.requests)
