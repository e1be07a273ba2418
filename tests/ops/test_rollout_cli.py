"""The CLI with the DriverRollout object (`--rollout`): `run --once` acts on its spec and writes its
status, gives its Lease up and logs its first and last lines (JSON with node and state as fields);
`status -o name|wide`, `status -w`; `plan --rollout`; the refusals, one line and exit 2 each."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from upgrader import __version__
from upgrader.commands.cli import build_parser, main
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"maxParallelUpgrades": 2, "maxUnavailable": "50%", "failureDomains": {"canary": "us-east-1a"}}
NAME = "driverrollout.gpu-upgrader.io/default"
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")  # the text log's time


class Served:
    def __init__(self, tmp: Path) -> None:
        self.cluster = EmulatedCluster()
        build(self.cluster, "healthy")
        crds = self.cluster.type("customresourcedefinitions", "apiextensions.k8s.io")
        self.cluster.store.create(crds, None, yaml.safe_load((ROOT / "deploy" / "crd.yaml").read_text()))
        self.rtype = self.cluster.type("driverrollouts", "gpu-upgrader.io", "v1alpha1")
        body = {"apiVersion": "gpu-upgrader.io/v1alpha1", "kind": "DriverRollout", "metadata": {"name": "default"}}
        self.cluster.store.create(self.rtype, None, {**body, "spec": SPEC})
        self.cluster.serve()
        self.kubeconfig = str(self.cluster.write_kubeconfig(tmp / "kubeconfig"))

    @property
    def obj(self) -> dict[str, Any]:
        return self.cluster.store.get(self.rtype, None, "default")

    def lease(self) -> dict[str, Any]:
        leases = self.cluster.type("leases", "coordination.k8s.io")
        return self.cluster.store.get(leases, "gpu-operator", "gpu-driver-upgrader")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    world = Served(tmp_path_factory.mktemp("rollout-cli"))
    yield world
    world.cluster.stop()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("UPGRADER_") and k != "KUBECONFIG"}


def test_run_once_acts_on_the_object_logs_json_and_gives_the_lease_up(served: Served) -> None:
    argv = [sys.executable, "-m", "upgrader.commands.cli", "run", "--once", "--rollout", "default",
            "--log-format", "json", "--kubeconfig", served.kubeconfig]
    done = subprocess.run(argv, capture_output=True, text=True, env={**_env(), "UPGRADER_IDENTITY": "once"},
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert lines[0]["message"] == (
        f"upgrader {__version__} starting one pass (--once): namespace gpu-operator, intent from rollout object "
        f"{NAME}, Lease gpu-operator/gpu-driver-upgrader as once"
    )
    assert lines[-1]["message"] == "stopped (--once done): Lease gpu-operator/gpu-driver-upgrader released"
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    moved = [line for line in lines if line["message"].endswith("-> cordon-required")]
    assert len(moved) == 2  # maxParallelUpgrades from the object's spec, in the canary zone
    assert all(line["state"] == "cordon-required" and line["node"].startswith("gpu-a") for line in moved), moved
    status = served.obj["status"]
    assert (status["phase"], status["observedGeneration"], status["currentDomain"]) == ("Running", 1, "us-east-1a")
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "True"
    assert served.lease()["spec"].get("holderIdentity") is None  # the next `run` takes over at once


def test_status_names_widens_and_plan_reads_the_object(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--kubeconfig", served.kubeconfig, "-o", "name"]) == 0
    out, err = capsys.readouterr()
    assert out == f"{NAME}\n" and err == f"upgrader: {NAME} (the only rollout; --rollout chooses)\n"
    main(["status", "--kubeconfig", served.kubeconfig, "--rollout", "default", "-o", "wide"])
    wide = capsys.readouterr().out
    assert "ROLLOUT\n  current domain   us-east-1a\n  next domain      us-east-1b\n" in wide
    assert "TARGETS\n  gpu-operator/nvidia-driver-daemonset" in wide
    assert build_parser().parse_args(["status", "-w"]).watch
    assert main(["plan", "--dry-run", "--kubeconfig", served.kubeconfig, "--rollout", "default", "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["waves"][0]["domain"] == "us-east-1a" and len(plan["waves"][0]["nodes"]) <= SPEC["maxParallelUpgrades"]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["run", "--once", "--rollout", "nowhere"],
         "upgrader: error: --rollout nowhere: driverrollout.gpu-upgrader.io/nowhere not found "
         "(kubectl apply -f deploy/rollout.yaml)"),
        (["run", "--once", "--rollout", "default", "--policy", str(ROOT / "policies" / "default.yaml")],
         f"upgrader: error: --policy {ROOT / 'policies' / 'default.yaml'} and the rollout default "
         "(--rollout or UPGRADER_ROLLOUT): "
         "give one; the object's spec is the policy, --policy is for clusters without the DriverRollout CRD"),
        (["run", "--once", "--rollout", "Not_A_Name"],
         "upgrader: error: settings: --rollout='Not_A_Name': "),
        (["plan", "--dry-run", "--rollout", "default", "--from-file", "x.json"],
         "upgrader: error: --from-file x.json and the rollout default (--rollout or UPGRADER_ROLLOUT): the rollout's "
         "spec is read from the live cluster; plan a file with --policy"),
    ],
)
def test_refusals_are_one_line_and_exit_2(
    served: Served, argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = served.obj
    requests = len(served.cluster.requests)
    assert main([*argv, "--kubeconfig", served.kubeconfig]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(line) and err.count("\n") == 1, err
    writes = [r for r in served.cluster.requests[requests:] if r.method not in ("GET",)]
    assert writes == [] and served.obj == before


def test_sigterm_stops_between_passes_and_gives_the_lease_up(served: Served) -> None:
    argv = [sys.executable, "-m", "upgrader.commands.cli", "run", "--rollout", "default", "--kubeconfig",
            served.kubeconfig]
    env = {**_env(), "UPGRADER_IDENTITY": "term", "UPGRADER_REQUEUE_SECONDS": "0.2"}
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while served.lease()["spec"].get("holderIdentity") != "term":
        assert proc.poll() is None and time.monotonic() < deadline, "the controller never took the Lease"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = [STAMP.sub("", line) for line in err.splitlines()]
    assert lines[0].startswith(f"INFO upgrader {__version__} starting: namespace gpu-operator, intent from rollout "
                               f"object {NAME}, Lease gpu-operator/gpu-driver-upgrader as term")
    # The pass under way when the signal came may still log its lines; then the controller stops.
    assert "INFO signal SIGTERM: stopping after the current pass" in lines, lines
    assert lines[-1] == "INFO stopped (signal SIGTERM): Lease gpu-operator/gpu-driver-upgrader released"
    assert lines.count("INFO signal SIGTERM: stopping after the current pass") == 1
    assert served.lease()["spec"].get("holderIdentity") is None


def test_pause_and_resume_patch_the_spec_and_resume_ends_an_older_configmap_pause(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pause", "--kubeconfig", served.kubeconfig, "--rollout", "default"]) == 0
    assert capsys.readouterr().out == f"paused: no new node starts ({NAME} spec.paused)\n"
    assert served.obj["spec"]["paused"] is True
    control = {"metadata": {"name": "gpu-driver-upgrade-control", "namespace": "gpu-operator"},
               "data": {"paused": "true"}}
    served.cluster.create("configmaps", control, "gpu-operator")
    try:
        assert main(["resume", "--kubeconfig", served.kubeconfig, "--rollout", "default", "-n", "gpu-operator"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("resumed the pause carried over from configmap gpu-operator/gpu-driver-upgrade-control\n"
                              "resumed: new nodes may start"), out
        assert served.obj["spec"]["paused"] is False
        left = served.cluster.get("configmaps", "gpu-driver-upgrade-control", "gpu-operator") or {}
        assert left["data"]["paused"] == "false"
    finally:
        served.cluster.store.delete(served.cluster.type("configmaps"), "gpu-operator", "gpu-driver-upgrade-control")


def test_a_spec_change_made_meanwhile_is_read_again_not_lost_or_refused(
    served: Served, capsys: pytest.CaptureFixture[str], mocker: Any
) -> None:
    """Between the CLI's read and its resourceVersion-guarded patch the controller writes the status
    and another person acknowledges another failure: the 409 is met by reading the object again, and
    both acknowledgements stand."""
    from upgrader.commands import control
    from upgrader.core.model.states import FAILED_AT, STATE_LABEL

    failed = {"gpu-b-01": "2026-12-03T10:00:00Z", "gpu-b-02": "2026-12-03T10:01:00Z"}
    nodes = served.cluster.type("nodes")
    for node, at in failed.items():
        body = {"metadata": {"labels": {STATE_LABEL: "upgrade-failed"}, "annotations": {FAILED_AT: at}}}
        served.cluster.store.patch(nodes, None, node, "application/merge-patch+json", body)
    real = control.find_rollout

    def read_then_others_write(api: Any, args: Any) -> Any:
        obj = real(api, args)
        status = [{"op": "add", "path": "/status", "value": {"phase": "Running"}}]
        served.cluster.store.patch(served.rtype, None, "default", "application/json-patch+json", status,
                                   subresource="status")
        theirs = {"spec": {"acknowledgedFailures": [{"node": "gpu-b-01", "failedAt": failed["gpu-b-01"]}]}}
        served.cluster.store.patch(served.rtype, None, "default", "application/merge-patch+json", theirs)
        return obj

    mocker.patch.object(control, "find_rollout", read_then_others_write)
    before = len(served.cluster.requests)
    try:
        assert main(["acknowledge", "gpu-b-02", "--kubeconfig", served.kubeconfig, "--rollout", "default"]) == 0
        assert capsys.readouterr().out.startswith("acknowledged gpu-b-02: upgrade-failed")
        assert served.obj["spec"]["acknowledgedFailures"] == [
            {"node": node, "failedAt": at} for node, at in sorted(failed.items())]
        patches = [r.status for r in served.cluster.requests[before:]
                   if r.resource == "driverrollouts" and r.verb == "patch" and not r.subresource]
        assert patches == [409, 200], patches
        assert main(["pause", "--kubeconfig", served.kubeconfig, "--rollout", "default"]) == 0
        assert served.obj["spec"]["paused"] is True
    finally:
        served.cluster.store.patch(served.rtype, None, "default", "application/merge-patch+json",
                                   {"spec": {"paused": False, "acknowledgedFailures": []}})
        for node in failed:
            body = {"metadata": {"labels": {STATE_LABEL: None}, "annotations": {FAILED_AT: None}}}
            served.cluster.store.patch(nodes, None, node, "application/merge-patch+json", body)
