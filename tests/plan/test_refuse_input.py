"""Issue 13, "Refuse what it cannot judge": `plan` refuses input that cannot tell what it must.

Reproductions: an export without ControllerRevisions listed every node as up to date while its own
columns showed 535.161.08 -> 550.90.07 (0 findings, exit 0); a nodes-only file said "0 of 0 nodes",
exit 0; a misspelt failureDomains.canary, an order entry or a labelKey no node has were ignored.

Each refusal is exactly one line on stderr, exit 2, nothing on stdout, and no write reaches the
cluster (a live plan sends GETs only). Files come from the real kubectl where practical.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from upgrader.commands.cli import main
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import node_object
from upgrader.sim.fleets.scenarios import build

EXPORT = "kubectl get nodes,pods,pdb,daemonsets,controllerrevisions,jobs -A -o json"
ALL_KINDS = "nodes,pods,pdb,daemonsets,controllerrevisions,jobs,clusterpolicies"
KINDS = [("nodes", "", "v1"), ("pods", "", "v1"), ("poddisruptionbudgets", "policy", "v1"),
         ("daemonsets", "apps", "v1"), ("controllerrevisions", "apps", "v1"), ("jobs", "batch", "v1"),
         ("clusterpolicies", "nvidia.com", "v1"), ("nvidiadrivers", "nvidia.com", "v1alpha1")]
DS_105 = "gpu-operator/nvidia-driver-daemonset-5.15.0-105-generic-ubuntu22.04"
ZONES = "(zones: us-east-1a, us-east-1b, us-east-1c)"
PDB_NOTE = ("upgrader: note: --from-file {path} has no PodDisruptionBudgets: the plan takes it the cluster has none; "
            "if the kubectl get left out pdb, evictions a budget would refuse are not shown\n")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("UPGRADER_") or name == "KUBECONFIG":
            monkeypatch.delenv(name)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Exit 2, nothing on stdout, one line on stderr: returned without `upgrader: error: `."""
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, ""), err
    assert err.startswith("upgrader: error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    return err.removeprefix("upgrader: error: ").removesuffix("\n")


def writes(cluster: EmulatedCluster) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in cluster.requests if r.method != "GET"]


# ----- files the real kubectl wrote ----------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatedCluster, Path]]:
    cluster = EmulatedCluster()
    build(cluster, "healthy")
    cluster.serve()
    kubeconfig = cluster.write_kubeconfig(tmp_path_factory.mktemp("served") / "kubeconfig")
    try:
        yield cluster, kubeconfig
    finally:
        cluster.stop()


def kubectl(kubeconfig: Path, tmp_path: Path, *args: str) -> str:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    path = tmp_path / "fleet.json"
    with path.open("w") as out:
        subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), "get",
                        *args, "-o", "json"], stdout=out, check=True, timeout=60)
    return str(path)


@pytest.mark.kubectl
def test_an_export_without_controller_revisions_is_refused(served: tuple[EmulatedCluster, Path], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    cluster, kubeconfig = served
    path = kubectl(kubeconfig, tmp_path, "nodes,pods,pdb,daemonsets,jobs", "-A")
    before = len(cluster.requests)
    assert refused(["plan", "--dry-run", "--from-file", path], capsys) == (
        f"--from-file {path}: no ControllerRevisions in it: without them upgrader cannot tell a node's driver "
        f"revision from the newest; export with {EXPORT}")
    assert cluster.requests[before:] == [] and writes(cluster) == []


@pytest.mark.kubectl
def test_a_nodes_only_export_is_refused_naming_every_missing_kind(
        served: tuple[EmulatedCluster, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig = served
    path = kubectl(kubeconfig, tmp_path, "nodes")
    assert refused(["plan", "--dry-run", "--from-file", path], capsys) == (
        f"--from-file {path}: no Pods, DaemonSets or ControllerRevisions in it: without them upgrader cannot see the "
        "driver pods and the GPU pods an upgrade evicts, tell which driver a node should run or tell a node's "
        f"driver revision from the newest; export with {EXPORT}")


@pytest.mark.kubectl
def test_an_export_of_one_namespace_is_refused(served: tuple[EmulatedCluster, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`-n gpu-operator` instead of `-A`: the driver is all there, the GPU workloads and PDBs are not."""
    _, kubeconfig = served
    path = kubectl(kubeconfig, tmp_path, ALL_KINDS, "-n", "gpu-operator")
    assert refused(["plan", "--dry-run", "--from-file", path], capsys) == (
        f"--from-file {path}: every Pod in it is in namespace gpu-operator: an export of one namespace leaves out "
        f"the GPU workloads and their PodDisruptionBudgets; export with {EXPORT}")


@pytest.mark.kubectl
def test_an_export_without_pdbs_is_planned_with_a_note(served: tuple[EmulatedCluster, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A kubectl List carries only items: none may be a cluster without budgets. The plan goes on and says
    what it took for granted."""
    _, kubeconfig = served
    path = kubectl(kubeconfig, tmp_path, "nodes,pods,daemonsets,controllerrevisions,jobs,clusterpolicies", "-A")
    code, out, err = run(["plan", "--dry-run", "--from-file", path, "-o", "json"], capsys)
    assert (code, err) == (0, PDB_NOTE.format(path=path))
    assert json.loads(out)["summary"]["to_upgrade"] == 6


@pytest.mark.kubectl
def test_the_full_export_plans_every_node_without_a_note(served: tuple[EmulatedCluster, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig = served
    path = kubectl(kubeconfig, tmp_path, ALL_KINDS, "-A")
    code, out, err = run(["plan", "--dry-run", "--from-file", path, "-o", "json"], capsys)
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert result["summary"]["to_upgrade"] == 6
    assert {(n["current_driver"], n["target_driver"], n["action"]) for n in result["nodes"]} == {
        ("535.161.08", "550.90.07", "upgrade")}


# ----- crafted clusters, exported as kubectl would ------------------------------------------------

Craft = Callable[[EmulatedCluster], None]


def export(tmp_path: Path, craft: Craft | None = None, kinds: list[tuple[str, str, str]] = KINDS) -> str:
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy")
    if craft is not None:
        craft(cluster)
    items = []
    for plural, group, version in kinds:
        items.extend(cluster.store.list(cluster.type(plural, group, version)).items)
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                                "items": items}))
    return str(path)


def gpu_node(name: str, kernel: str = "6.8.0-1017-generic", **labels: str) -> Craft:
    """A GPU node whose kernel no driver DaemonSet is for."""
    def craft(cluster: EmulatedCluster) -> None:
        obj = node_object(name, "us-east-1d", kernel, "NVIDIA-H100-80GB-HBM3", 9)
        obj["metadata"]["labels"].update(labels)
        cluster.create("nodes", obj)
    return craft


def test_a_gpu_node_no_driver_daemonset_selects_is_refused(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = export(tmp_path, gpu_node("gpu-d-01"))
    assert refused(["plan", "--dry-run", "--from-file", path], capsys) == (
        f"--from-file {path}: GPU node gpu-d-01 is selected by no driver DaemonSet in it: the plan would leave it "
        f"out; export the driver DaemonSets that install its driver ({EXPORT}); a node whose driver is not the GPU "
        "Operator's carries nvidia.com/gpu.deploy.driver=false or pre-installed")


def test_several_uncovered_gpu_nodes_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def four(cluster: EmulatedCluster) -> None:
        for i in range(1, 5):
            gpu_node(f"gpu-d-0{i}")(cluster)

    path = export(tmp_path, four)
    assert refused(["plan", "--dry-run", "--from-file", path], capsys).startswith(
        f"--from-file {path}: GPU nodes gpu-d-01, gpu-d-02, gpu-d-03 and 1 more are selected by no driver DaemonSet "
        "in it: the plan would leave them out; export the driver DaemonSets that install their driver")


@pytest.mark.parametrize("value", ["pre-installed", "false"])
def test_a_gpu_node_whose_driver_is_not_the_operators_is_left_out(value: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = export(tmp_path, gpu_node("gpu-dgx-01", **{"nvidia.com/gpu.deploy.driver": value}))
    code, out, err = run(["plan", "--dry-run", "--from-file", path, "-o", "json"], capsys)
    assert (code, err) == (0, "")
    assert "gpu-dgx-01" not in {n["name"] for n in json.loads(out)["nodes"]}


def _delete(plural: str, group: str, keep: Callable[[dict[str, Any]], bool]) -> Craft:
    def craft(cluster: EmulatedCluster) -> None:
        rtype = cluster.type(plural, group)
        for obj in cluster.store.objects(rtype):
            if not keep(obj):
                cluster.store.delete(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"])
    return craft


def test_no_driver_daemonset_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The validator's DaemonSet and its revisions are there; no driver one is (or the selector is wrong)."""
    drivers = _delete("daemonsets", "apps", lambda d: "nvidia-driver" not in d["metadata"]["name"])
    path = export(tmp_path, drivers)
    assert refused(["plan", "--dry-run", "--from-file", path], capsys) == (
        f"--from-file {path}: no driver DaemonSet in it (none labelled app.kubernetes.io/component=nvidia-driver): "
        "without one upgrader cannot tell which driver a node should run; export with "
        f"{EXPORT}, or set UPGRADER_DRIVER_DAEMONSET_SELECTOR to their labels")


def test_a_driver_daemonset_without_its_revisions_is_refused(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Other DaemonSets' revisions are in the file (say, from a second `kubectl get` glued on), not its own."""
    def without_105(cluster: EmulatedCluster) -> None:
        ds = cluster.get("daemonsets", DS_105.split("/")[1], "gpu-operator", "apps")
        assert ds is not None
        uid = ds["metadata"]["uid"]
        owned = lambda r: any(o.get("uid") == uid for o in r["metadata"].get("ownerReferences") or [])  # noqa: E731
        _delete("controllerrevisions", "apps", lambda r: not owned(r))(cluster)

    path = export(tmp_path, without_105)
    assert refused(["plan", "--dry-run", "--from-file", path], capsys) == (
        f"--from-file {path}: no ControllerRevision of driver DaemonSet {DS_105} in it: without it upgrader "
        f"cannot tell a node's driver revision from the newest; export with {EXPORT}")


def _owned_by_nvidiadriver(cluster: EmulatedCluster) -> None:
    """The driver DaemonSets as the GPU Operator's NVIDIADriver controller makes them: owned by one."""
    driver = cluster.create("nvidiadrivers", {"metadata": {"name": "default"}, "spec": {"driverType": "gpu"}},
                            group="nvidia.com", version="v1alpha1")
    owner = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "name": "default",
             "uid": driver["metadata"]["uid"], "controller": True}
    rtype = cluster.type("daemonsets", "apps")
    for ds in cluster.store.objects(rtype, "gpu-operator"):
        if "nvidia-driver" in ds["metadata"]["name"]:
            cluster.store.mutate(rtype, "gpu-operator", ds["metadata"]["name"],
                                 lambda d: d["metadata"].__setitem__("ownerReferences", [owner]))


def test_nvidiadrivers_are_required_where_they_own_the_driver(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = export(tmp_path, _owned_by_nvidiadriver, KINDS[:-1])
    message = refused(["plan", "--dry-run", "--from-file", path], capsys)
    assert message == (
        f"--from-file {path}: no NVIDIADrivers in it, yet driver DaemonSet {DS_105} belongs to NVIDIADriver "
        "default: without them upgrader cannot check that no two select one node; export with "
        "kubectl get nodes,pods,pdb,daemonsets,controllerrevisions,jobs,nvidiadrivers -A -o json")
    with_them = export(tmp_path, _owned_by_nvidiadriver)
    code, _, err = run(["plan", "--dry-run", "--from-file", with_them, "-o", "json"], capsys)
    assert (code, err) == (0, "")


def test_a_cluster_with_no_pdb_is_planned_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = export(tmp_path, _delete("poddisruptionbudgets", "policy", lambda p: False))
    code, out, err = run(["plan", "--dry-run", "--from-file", path, "-o", "json"], capsys)
    assert (code, err) == (0, PDB_NOTE.format(path=path))
    assert json.loads(out)["summary"]["to_upgrade"] == 6


# ----- the policy against the fleet ---------------------------------------------------------------


def policy_refusal(policy: str, problem: str) -> str:
    """The policy error as `plan` words it: the policy's file, then what in it fits no node."""
    return f"policy {policy}: {problem}"


def policy_file(tmp_path: Path, failure_domains: dict[str, Any]) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"failureDomains": failure_domains}))
    return str(path)


@pytest.mark.parametrize(("failure_domains", "problem"), [
    ({"canary": "us-east-1z"}, f'failureDomains.canary: "us-east-1z" is not the zone of any managed GPU node {ZONES}'),
    ({"order": ["us-east-1b", "us-east-1d"]},
     f'failureDomains.order.1: "us-east-1d" is not the zone of any managed GPU node {ZONES}'),
    ({"labelKey": "topology.kubernetes.io/zoen"},
     'failureDomains.labelKey: "topology.kubernetes.io/zoen" is a label no managed GPU node carries (6 nodes): '
     "every node would be in domain <none>"),
], ids=["canary", "order", "label-key"])
def test_a_domain_the_policy_names_and_no_node_is_in_is_refused(
        failure_domains: dict[str, Any], problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = export(tmp_path)
    policy = policy_file(tmp_path, failure_domains)
    assert refused(["plan", "--dry-run", "--from-file", fleet, "--policy", policy], capsys) == policy_refusal(
        policy, problem)


def test_a_fleet_without_zones_plans_as_one_domain_under_the_default_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def unzoned(cluster: EmulatedCluster) -> None:
        for node in cluster.store.objects(cluster.type("nodes")):
            cluster.store.patch(cluster.type("nodes"), None, node["metadata"]["name"], "application/merge-patch+json",
                                {"metadata": {"labels": {"topology.kubernetes.io/zone": None}}})

    fleet = export(tmp_path, unzoned)
    policy = policy_file(tmp_path, {"labelKey": "topology.kubernetes.io/zone", "soakSeconds": 60})
    code, out, err = run(["plan", "--dry-run", "--from-file", fleet, "--policy", policy, "-o", "json"], capsys)
    assert (code, err) == (0, "")
    assert {w["domain"] for w in json.loads(out)["waves"]} == {"<none>"}


# ----- a live cluster: the same refusals, and GET requests only -----------------------------------


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[EmulatedCluster, str]]:
    cluster = EmulatedCluster()
    build(cluster, "healthy")
    cluster.serve()
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    try:
        yield cluster, str(kubeconfig)
    finally:
        cluster.stop()


def test_live_a_misspelt_canary_is_refused_reading_only(live: tuple[EmulatedCluster, str], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    cluster, kubeconfig = live
    policy = policy_file(tmp_path, {"canary": "us-east-1z"})
    before = len(cluster.requests)
    assert refused(["plan", "--dry-run", "--kubeconfig", kubeconfig, "--policy", policy], capsys) == policy_refusal(
        policy, f'failureDomains.canary: "us-east-1z" is not the zone of any managed GPU node {ZONES}')
    assert cluster.requests[before:] and {r.method for r in cluster.requests[before:]} == {"GET"}
    assert writes(cluster) == []


def test_live_no_driver_daemonset_where_upgrader_looks_is_refused(
        live: tuple[EmulatedCluster, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, kubeconfig = live
    monkeypatch.setenv("UPGRADER_DRIVER_DAEMONSET_SELECTOR", "app.kubernetes.io/component=nvidia-drivers")
    assert refused(["plan", "--dry-run", "--kubeconfig", kubeconfig], capsys) == (
        "the cluster has no driver DaemonSet in namespace gpu-operator (none labelled "
        "app.kubernetes.io/component=nvidia-drivers): there is no driver to upgrade; UPGRADER_DRIVER_NAMESPACE and "
        "UPGRADER_DRIVER_DAEMONSET_SELECTOR say where to look")
    assert writes(cluster) == []


def test_live_a_gpu_node_no_driver_daemonset_selects_is_refused(live: tuple[EmulatedCluster, str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    cluster, kubeconfig = live
    gpu_node("gpu-d-01")(cluster)
    assert refused(["plan", "--dry-run", "--kubeconfig", kubeconfig], capsys) == (
        "GPU node gpu-d-01 is selected by no driver DaemonSet in namespace gpu-operator (labelled "
        "app.kubernetes.io/component=nvidia-driver): the plan would leave it out; a node whose driver is not the "
        "GPU Operator's carries nvidia.com/gpu.deploy.driver=false or pre-installed")
    assert writes(cluster) == []


def test_live_a_cluster_without_pdbs_is_planned_without_a_note(live: tuple[EmulatedCluster, str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Listed, zero is the truth: nothing to note."""
    cluster, kubeconfig = live
    _delete("poddisruptionbudgets", "policy", lambda p: False)(cluster)
    code, out, err = run(["plan", "--dry-run", "--kubeconfig", kubeconfig, "-o", "json"], capsys)
    assert (code, err) == (0, "")
    assert json.loads(out)["summary"]["to_upgrade"] == 6
