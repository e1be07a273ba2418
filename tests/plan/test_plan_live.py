"""Plan against a live (emulated) cluster: read-only, and the same answer as from kubectl's output."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from upgrader.commands.cli import main
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build


@pytest.fixture
def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    cluster = EmulatedCluster()
    build(cluster, "pdb-blocked")
    cluster.serve()
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    yield cluster, kubeconfig
    cluster.stop()


def test_live_plan_sends_only_get_requests(served, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    cluster, kubeconfig = served
    before = len(cluster.requests)
    code = main(["plan", "--dry-run", "--kubeconfig", str(kubeconfig), "-o", "json"])
    result = json.loads(capsys.readouterr().out)
    requests = cluster.requests[before:]
    assert code == 1 and result["summary"]["to_upgrade"] == 6
    assert requests, "the plan read the cluster"
    assert {r.method for r in requests} == {"GET"}, [(r.method, r.path) for r in requests if r.method != "GET"]
    assert {r.verb for r in requests} <= {"list", "get"}
    assert [f["node"] for f in result["findings"] if f["kind"] == "pdb-blocks-eviction"] == ["gpu-a-01"]


@pytest.mark.kubectl
def test_plan_from_kubectl_output_matches_the_live_plan(served, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    _, kubeconfig = served
    listing = tmp_path / "fleet.json"
    with listing.open("w") as out:
        subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), "get",
                        "nodes,pods,pdb,daemonsets,controllerrevisions,jobs,nvidiadrivers", "-A", "-o", "json"],
                       stdout=out, check=True, timeout=60)
    assert main(["plan", "--dry-run", "--from-file", str(listing), "-o", "json"]) == 1
    from_file = json.loads(capsys.readouterr().out)
    assert main(["plan", "--dry-run", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 1
    live = json.loads(capsys.readouterr().out)
    assert from_file["findings"] == live["findings"]
    assert [(n["name"], n["wave"], n["target_image"]) for n in from_file["nodes"]] == [
        (n["name"], n["wave"], n["target_image"]) for n in live["nodes"]]


def test_a_malformed_live_nvidiadriver_stops_the_plan_in_one_line(  # type: ignore[no-untyped-def]
    served, capsys: pytest.CaptureFixture[str]
) -> None:
    """An NVIDIADriver the CRD's schema let through with a wrong type (an old CRD, or none): the
    plan cannot check driver selector overlap, so it stops, naming the object and the field."""
    cluster, kubeconfig = served
    bad = {"metadata": {"name": "branch-550"}, "spec": {"default": "yes", "nodeSelector": {}}}
    cluster.create("nvidiadrivers", bad, None, "nvidia.com", "v1alpha1")
    code = main(["plan", "--dry-run", "--kubeconfig", str(kubeconfig)])
    out, err = capsys.readouterr()
    assert code == 2
    assert err == (
        "upgrader: error: cannot check driver selectors: "
        "NVIDIADriver branch-550: spec.default is 'yes', not a boolean\n"
    )
    assert "Traceback" not in out + err
