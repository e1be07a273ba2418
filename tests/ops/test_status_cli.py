"""`upgrader status`: the table, the JSON, and --watch refreshing with per-domain progress bars."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.conftest import ctrl_c_reaches
from upgrader.commands.cli import main
from upgrader.controller.runner import build_controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import State
from upgrader.core.policy.policy import Policy
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatedCluster, Path]]:
    cluster = EmulatedCluster()
    build(cluster, "pdb-blocked")
    url = cluster.serve()
    kubeconfig = cluster.write_kubeconfig(tmp_path_factory.mktemp("status") / "kubeconfig")
    # A Lease that outlasts the module: `status` leads with "no controller is running" once it expires.
    settings = Settings(identity="status", lease_duration_seconds=3600)
    controller = build_controller(k8s.ApiClient(k8s.Configuration(host=url)), Policy(), settings)
    for _ in range(3):
        controller.reconcile()
    yield cluster, kubeconfig
    cluster.stop()


def test_status_json_has_the_promised_fields(served: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig = served
    assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["phase"] in ("Running", "Halted")
    assert set(status["nodes_by_state"]) == {s.value for s in State} | {"unlabelled"}
    assert sum(status["nodes_by_state"].values()) == 6
    assert isinstance(status["blocked"], list)
    for entry in status["blocked"]:
        assert set(entry) >= {"node", "state", "reason", "since"}


def test_status_table_leads_with_the_phase(served: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig = served
    assert main(["status", "--kubeconfig", str(kubeconfig)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PHASE: ")
    assert "NODES BY STATE" in out and "DOMAINS" in out and "us-east-1a (canary)" in out


def test_status_without_a_rollout_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = EmulatedCluster()
    cluster.serve()
    try:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        assert main(["status", "--kubeconfig", str(kubeconfig)]) == 1
        assert "no rollout status in configmap gpu-operator/gpu-driver-upgrade-status" in capsys.readouterr().err
    finally:
        cluster.stop()


def test_status_watch_refreshes_with_progress_bars(served: Any) -> None:
    _, kubeconfig = served
    argv = [sys.executable, "-m", "upgrader.commands.cli", "status", "--watch", "--kubeconfig", str(kubeconfig)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy(),
                            preexec_fn=ctrl_c_reaches)
    time.sleep(5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    text = out.decode()
    assert text.count("\x1b[2J\x1b[H") >= 2, "the screen was redrawn"
    assert "DOMAINS" in text and "[" in text and "/2 done" in text
    assert b"Traceback" not in err
