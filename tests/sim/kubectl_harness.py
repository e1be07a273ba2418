"""The harness of the end-to-end kubectl tests: `upgrader sim serve` run as a subprocess with the
real kubectl pointed at it (the `Sim` handle and its fixtures), and readers of kubectl's tables."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import ScenarioInfo, build

NODES = ["gpu-a-01", "gpu-a-02", "gpu-b-01", "gpu-b-02", "gpu-c-01", "gpu-c-02"]
STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
HASH_LABEL = "controller-revision-hash"
OPERATOR_NS = "gpu-operator"
DRIVER_DS = {
    "105": "nvidia-driver-daemonset-5.15.0-105-generic-ubuntu22.04",
    "113": "nvidia-driver-daemonset-5.15.0-113-generic-ubuntu22.04",
}
# Scenario nodes alternate between the two kernels, starting with 105.
DRIVER_DS_OF_NODE = {node: DRIVER_DS["105" if i % 2 == 0 else "113"] for i, node in enumerate(NODES)}
PDB_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."
READY_LINE = re.compile(r"listening on (http://127\.0\.0\.1:\d+)$", re.MULTILINE)
START_TIMEOUT = 20.0


# ----- running the emulator and kubectl -----------------------------------------------------


def _upgrader() -> list[str]:
    script = Path(sys.executable).with_name("upgrader")
    return [str(script)] if script.exists() else [sys.executable, "-m", "upgrader.commands.cli"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # every kubectl call names the emulator's kubeconfig itself
    return env


@pytest.fixture(scope="session")
def kubectl_bin() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl not installed (not on PATH): the end-to-end kubectl tests need the real binary")
    return found


@dataclass
class Sim:
    """One `upgrader sim serve` subprocess and a kubectl pointed at it."""

    proc: subprocess.Popen[bytes]
    url: str
    kubeconfig: Path
    cache_dir: Path
    kubectl_bin: str

    def argv(self, *args: str) -> list[str]:
        """A kubectl command line for this server (its own discovery cache, so runs stay apart)."""
        return [
            self.kubectl_bin,
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.cache_dir),
            *args,
        ]

    def kubectl(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_env(),
        )

    def ok(self, *args: str, timeout: float = 30.0) -> str:
        """kubectl's stdout, after checking it exited 0 and said nothing on stderr."""
        result = self.kubectl(*args, timeout=timeout)
        assert result.returncode == 0 and result.stderr == "", (
            f"kubectl {' '.join(args)} exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
        return result.stdout

    def get(self, *args: str) -> list[dict[str, str]]:
        """`kubectl get ...` parsed into rows keyed by the printed column headers."""
        tables = parse_tables(self.ok("get", *args))
        assert len(tables) == 1, tables
        return tables[0]


def start_sim(kubectl_bin: str, workdir: Path, scenario: str, *extra: str) -> Sim:
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = workdir / "kubeconfig"
    out_path, err_path = workdir / "serve.out", workdir / "serve.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [
                *_upgrader(),
                "sim",
                "serve",
                "--scenario",
                scenario,
                "--port",
                "0",
                "--kubeconfig",
                str(kubeconfig),
                *extra,
            ],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=_env(),
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        match = READY_LINE.search(out_path.read_text())
        if match:
            return Sim(proc, match.group(1), kubeconfig, workdir / "kube-cache", kubectl_bin)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop_sim(proc)
    pytest.fail(
        f"upgrader sim serve --scenario {scenario} did not report 'listening on' within {START_TIMEOUT}s "
        f"(exit {proc.returncode}):\n{out_path.read_text()}\n{err_path.read_text()}"
    )


def stop_sim(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM, then SIGKILL if it has not stopped within 10 s; returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            pytest.fail("upgrader sim serve ignored SIGTERM for 10 s and was killed")
    return proc.returncode


StartSim = Callable[..., Sim]


@pytest.fixture
def sim_factory(kubectl_bin: str, tmp_path: Path) -> Iterator[StartSim]:
    """Start servers for one test (`sim_factory(scenario, *serve_args)`); all stop at teardown."""
    started: list[Sim] = []

    def start(scenario: str, *extra: str) -> Sim:
        sim = start_sim(kubectl_bin, tmp_path / f"sim{len(started)}", scenario, *extra)
        started.append(sim)
        return sim

    yield start
    codes = [stop_sim(sim.proc) for sim in started]
    assert codes == [0] * len(started), "upgrader sim serve should exit 0 on SIGTERM"


@pytest.fixture(scope="module")
def blocked(kubectl_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """A `pdb-blocked` cluster that tests only read."""
    sim = start_sim(kubectl_bin, tmp_path_factory.mktemp("blocked"), "pdb-blocked")
    yield sim
    assert stop_sim(sim.proc) == 0


@pytest.fixture(scope="module")
def healthy(kubectl_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """A `healthy` cluster; tests that change it each touch their own node and leave it Ready."""
    sim = start_sim(kubectl_bin, tmp_path_factory.mktemp("healthy"), "healthy")
    yield sim
    assert stop_sim(sim.proc) == 0


@pytest.fixture(scope="module")
def healthy_info() -> ScenarioInfo:
    """What the healthy scenario builds, from the scenario code (in process, virtual time)."""
    return build(EmulatedCluster.virtual(), "healthy")


@pytest.fixture(scope="module")
def blocked_info() -> ScenarioInfo:
    """What the pdb-blocked scenario builds, from the scenario code (in process, virtual time)."""
    return build(EmulatedCluster.virtual(), "pdb-blocked")


# ----- reading kubectl's tables -------------------------------------------------------------


def parse_tables(text: str) -> list[list[dict[str, str]]]:
    """kubectl's column output (one or more tables separated by blank lines) as rows of cells.

    Headers are separated by at least two spaces (a header may hold one space, as in
    `NOMINATED NODE`); kubectl's tabwriter starts every cell at its header's offset.
    """
    tables = []
    for block in re.split(r"\n\s*\n", text.strip("\n")):
        lines = block.splitlines()
        header = [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", lines[0])]
        rows = []
        for line in lines[1:]:
            cells = {}
            for i, (start, name) in enumerate(header):
                end = header[i + 1][0] if i + 1 < len(header) else None
                cells[name] = line[start:end].strip()
            rows.append(cells)
        tables.append(rows)
    return tables


def headers(text: str) -> list[str]:
    return re.findall(r"\S+(?: \S+)*", text.splitlines()[0])


def by(rows: list[dict[str, str]], column: str) -> dict[str, dict[str, str]]:
    keyed = {row[column]: row for row in rows}
    assert len(keyed) == len(rows), f"duplicate {column} values in {rows}"
    return keyed
