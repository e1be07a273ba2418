"""`upgrader run --once`: exit 0 only when the pass ran; when it could not act (API server
unreachable, a request failed, another replica leads) exit 1 with one line saying why, and no `{}`."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_mock import MockerFixture

from upgrader.commands.cli import main
from upgrader.core.model.timefmt import rfc3339_micro
from upgrader.sim.apiserver.faults import FaultPlan, FaultRates
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

LEASE = "gpu-operator/gpu-driver-upgrader"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("UPGRADER_") or name == "KUBECONFIG":
            monkeypatch.delenv(name)


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


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens


def _kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


@pytest.mark.parametrize("election", [[], ["--no-leader-election"]], ids=["leader-election", "no-election"])
def test_an_unreachable_api_server_is_exit_1_and_one_line(election: list[str], tmp_path: Path) -> None:
    """The reproduction printed `{}` and exited 0. A real process, so log output would show too."""
    server = f"http://127.0.0.1:{_closed_port()}"
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", server)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UPGRADER_") and k != "KUBECONFIG"}
    done = subprocess.run([str(Path(sys.executable).with_name("upgrader")), "run", "--once", "--kubeconfig",
                           kubeconfig, *election], capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (
        1, "", f"upgrader: run --once could not act: cannot reach the API server {server}: Connection refused\n")


def test_a_pass_that_ran_prints_the_status_and_exits_0(cluster: tuple[EmulatedCluster, str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    emulated, kubeconfig = cluster
    assert main(["run", "--once", "--kubeconfig", kubeconfig]) == 0
    out, err = capsys.readouterr()
    assert "could not act" not in err
    assert json.loads(out)["nodes_by_state"]  # the pass saw the fleet
    lease = emulated.get("leases", "gpu-driver-upgrader", "gpu-operator", "coordination.k8s.io")
    assert lease is not None and lease["spec"]["acquireTime"], "the pass took the Lease"
    assert lease["spec"]["holderIdentity"] is None, "and --once gave it up on its way out"


def test_another_replica_holding_the_lease_is_exit_1(cluster: tuple[EmulatedCluster, str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    emulated, kubeconfig = cluster
    emulated.create("leases", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "gpu-driver-upgrader", "namespace": "gpu-operator"},
        "spec": {"holderIdentity": "upgrader-7d9f-abcde", "leaseDurationSeconds": 3600,
                 "renewTime": rfc3339_micro(time.time())},
    }, "gpu-operator", "coordination.k8s.io")
    writes = len([r for r in emulated.requests if r.method != "GET"])
    assert main(["run", "--once", "--kubeconfig", kubeconfig]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"upgrader: run --once could not act: not the leader: Lease {LEASE} is held by "
                   "upgrader-7d9f-abcde, which acts\n")
    assert len([r for r in emulated.requests if r.method != "GET"]) == writes  # nothing written


def test_a_failed_pass_is_exit_1_naming_the_error(cluster: tuple[EmulatedCluster, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    emulated, kubeconfig = cluster
    emulated.faults = FaultPlan({"list": FaultRates(conflict409=1.0)})  # an answer not worth retrying
    assert main(["run", "--once", "--no-leader-election", "--kubeconfig", kubeconfig]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("upgrader: run --once could not act: the pass failed: ")
    assert "409" in err or "Conflict" in err


def test_failed_writes_are_exit_1_counting_them(cluster: tuple[EmulatedCluster, str], mocker: MockerFixture,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from upgrader.controller import runner

    build_controller = runner.build_controller

    def without_retries(*args: Any, **kwargs: Any) -> Any:
        controller = build_controller(*args, **kwargs)
        controller.api.attempts = 1  # an injected 500 is retried, slowly
        return controller

    mocker.patch.object(runner, "build_controller", side_effect=without_retries)
    emulated, kubeconfig = cluster
    emulated.faults = FaultPlan({"patch": FaultRates(error500=1.0)})
    assert main(["run", "--once", "--no-leader-election", "--kubeconfig", kubeconfig]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["nodes_total"] == 6  # the pass ran: its status is shown
    # Every write failed (how many a pass makes is the controller's business).
    assert re.fullmatch(r"upgrader: run --once: (\d+) of \1 writes failed, the first: \w+ on gpu-\w-\d\d: "
                        r"Internal error occurred: injected fault\n", err), err
