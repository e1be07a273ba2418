"""`upgrader run`, a real process, against an API server that is away: one line saying so, backoff,
one line per change of condition, one when it is back; never a line per retry (issue 13, item 3: it
printed 183 lines in 15 s against a closed port, mostly urllib3 `Retrying (...)` warnings)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.conftest import free_port as closed_port
from upgrader import __version__
from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.api import Request, Response, encode
from upgrader.sim.apiserver.faults import VERBS, FaultPlan, FaultRates
from upgrader.sim.apiserver.kubeconfig import write_kubeconfig
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.scenarios import build

from .conftest import FAST_POLICY, FAST_SIM
from .partition import PartitionProxy

ROOT = Path(__file__).resolve().parents[2]
CAP = "retrying with backoff (up to 30 s)"
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
FORBIDDEN = 'leases.coordination.k8s.io "gpu-driver-upgrader" is forbidden: User "upgrader" cannot get resource'


class Replica:
    """`upgrader run` with its stdout and stderr in one file."""

    def __init__(self, tmp: Path, name: str, server: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        kubeconfig = write_kubeconfig(tmp / f"{name}.kubeconfig", server)
        (tmp / "policy.yaml").write_text(yaml.safe_dump(FAST_POLICY))
        self.out = tmp / f"{name}.log"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("UPGRADER_") and k != "KUBECONFIG"}
        with self.out.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "upgrader.commands.cli", "run", "--kubeconfig", str(kubeconfig),
                 "--policy", str(tmp / "policy.yaml")],
                env={**clean, "UPGRADER_IDENTITY": name, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                cwd=ROOT,
            )

    def lines(self) -> list[str]:
        return [STAMP.sub("", line) for line in self.out.read_text().splitlines()]

    def wait_for(self, what: str, found: Callable[[list[str]], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not found(self.lines()):
            assert self.proc.poll() is None, f"exited while waiting for {what}: {self.lines()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.lines()}"
            time.sleep(0.1)

    def said(self, text: str) -> Callable[[list[str]], bool]:
        return lambda lines: any(text in line for line in lines)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def test_a_closed_port_and_a_silent_server_are_one_line_each(tmp_path: Path, silent_server: str) -> None:
    """Both at once, to keep the suite short: the closed port for the issue's 15 s, the silent server
    until its first try has timed out (a try lasts at most 20 s)."""
    refused = f"http://127.0.0.1:{closed_port()}"
    closed, silent = Replica(tmp_path, "closed", refused), Replica(tmp_path, "silent", silent_server)
    time.sleep(15)
    assert closed.stop() == 0
    silent.wait_for("the silent server's line", silent.said("unreachable"), timeout=40)
    assert silent.stop() == 0
    seen = ((closed, refused, "Connection refused"), (silent, silent_server, "no answer within 20 s"))
    for replica, server, why in seen:
        assert replica.lines() == [
            f"INFO upgrader {__version__} starting: namespace gpu-operator, intent from policy file "
            f"{tmp_path / 'policy.yaml'}, Lease gpu-operator/gpu-driver-upgrader as {replica.name}",
            f"WARNING API server {server} unreachable: {why}; {CAP}",  # was 183 lines for the closed port
            "INFO signal SIGTERM: stopping after the current pass",
            "INFO stopped (signal SIGTERM): Lease gpu-operator/gpu-driver-upgrader not held",
        ]


class Refusing:
    """The emulator answering every request with 403 while `on` (there is no fault kind for that)."""

    def __init__(self, cluster: EmulatedCluster) -> None:
        self.on = False
        handle = cluster.dispatcher.handle

        def handler(request: Request) -> Response:
            if self.on:
                return Response(403, encode(errors.ApiError(403, FORBIDDEN, reason="Forbidden").body()))
            return handle(request)

        cluster.dispatcher.handle = handler  # type: ignore[method-assign]


def test_unreachable_then_refusing_then_back_is_one_line_per_change(tmp_path: Path) -> None:
    cluster = EmulatedCluster(settings=SimSettings(**FAST_SIM))
    build(cluster, "healthy", 6, job_seconds=1.5)
    url = cluster.serve()
    proxy = PartitionProxy(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    refusing = Refusing(cluster)
    fast = {"UPGRADER_REQUEUE_SECONDS": "0.5", "UPGRADER_LEASE_DURATION_SECONDS": "3"}
    replica = Replica(tmp_path, "replica", proxy.url, fast)
    server = f"API server {proxy.url}"
    try:
        replica.wait_for("a node to start", replica.said("-> cordon-required"))
        proxy.partition()
        replica.wait_for("the unreachable line", replica.said(f"{server} unreachable: "))
        # Each condition set before the last one is lifted: no request is answered normally meanwhile.
        cluster.faults = FaultPlan({verb: FaultRates(error500=1.0) for verb in VERBS})  # its fault injection
        proxy.heal()
        replica.wait_for("the 500 line", replica.said(f"{server} answered 500"))
        refusing.on = True
        cluster.faults = None
        replica.wait_for("the 403 line", replica.said(f"{server} answered 403"))
        refusing.on = False
        replica.wait_for("the line saying it is back", replica.said("reachable again"))
        assert replica.stop() == 0
    finally:
        if replica.proc.poll() is None:
            replica.proc.kill()
        proxy.close()
        cluster.stop()
    lines = replica.lines()
    about_server = [line for line in lines if server in line]
    assert [re.sub(r"unreachable: .*;", "unreachable: ...;", line) for line in about_server[:3]] == [
        f"WARNING {server} unreachable: ...; {CAP}",
        f"WARNING {server} answered 500 InternalError: Internal error occurred: injected fault; {CAP}",
        f"WARNING {server} answered 403 Forbidden: {FORBIDDEN}; {CAP}",
    ]
    assert len(about_server) == 4 and re.fullmatch(rf"INFO {server} reachable again after \d+ s", about_server[3])
    warnings = [line for line in lines if line.startswith("WARNING")]
    # Besides the three: the Lease held but not renewable, said by the pass (at most once or twice).
    assert len(warnings) <= 5, warnings
    assert not [line for line in lines if "Retrying" in line or "pass aborted" in line or "lost (" in line]
