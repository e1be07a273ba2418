"""`upgrader plan --dry-run`: every finding kind on crafted kubectl Lists, exit codes, live read-only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from upgrader.commands.cli import main
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

KINDS = [("nodes", "", "v1"), ("pods", "", "v1"), ("poddisruptionbudgets", "policy", "v1"),
         ("daemonsets", "apps", "v1"), ("controllerrevisions", "apps", "v1"), ("jobs", "batch", "v1"),
         ("nvidiadrivers", "nvidia.com", "v1alpha1"), ("clusterpolicies", "nvidia.com", "v1")]
ROOT = Path(__file__).resolve().parent.parent.parent


def export(cluster: EmulatedCluster) -> dict[str, Any]:
    """The cluster as `kubectl get nodes,pods,pdb,daemonsets,controllerrevisions,jobs,nvidiadrivers -A -o json`."""
    items = []
    for plural, group, version in KINDS:
        items.extend(cluster.store.list(cluster.type(plural, group, version)).items)
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


Craft = Callable[[EmulatedCluster], None]


def plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: str = "healthy", craft: Craft | None = None,
         extra: list[str] | None = None, policy: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    cluster = EmulatedCluster.virtual()
    build(cluster, scenario)
    if craft is not None:
        craft(cluster)
    listing = tmp_path / "fleet.json"
    listing.write_text(json.dumps(export(cluster)))
    args = ["plan", "--dry-run", "--from-file", str(listing), "-o", "json", *(extra or [])]
    if policy is not None:
        (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
        args += ["--policy", str(tmp_path / "policy.yaml")]
    capsys.readouterr()
    code = main(args)
    return code, json.loads(capsys.readouterr().out)


def findings(result: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in result["findings"] if f["kind"] == kind]


def node(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in result["nodes"] if n["name"] == name)


def test_healthy_fleet_plans_every_node_with_no_blocker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, result = plan(tmp_path, capsys)
    assert code == 0
    assert [f for f in result["findings"] if f["severity"] == "blocking"] == []
    assert result["summary"]["to_upgrade"] == 6
    assert [w["domain"] for w in result["waves"]][:2] == ["us-east-1a", "us-east-1a"]
    a01 = node(result, "gpu-a-01")
    assert (a01["current_driver"], a01["target_driver"]) == ("535.161.08", "550.90.07")
    assert a01["target_image"] == "550-5.15.0-105-generic-ubuntu22.04"
    assert a01["wave"] == 1 and a01["domain"] == "us-east-1a"
    assert "inference/triton-0" in a01["gpu_pods"] and "web/api-gateway-0" not in a01["gpu_pods"]
    assert set(result["nodes"][0]) >= {"name", "domain", "wave", "current_driver", "target_driver", "target_image",
                                       "findings"}


def test_waves_follow_the_policy_budgets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = {"maxParallelUpgrades": 2, "maxUnavailable": "50%", "failureDomains": {"canary": "us-east-1b"}}
    _, result = plan(tmp_path, capsys, policy=policy)
    assert [(w["domain"], len(w["nodes"])) for w in result["waves"]] == [
        ("us-east-1b", 2), ("us-east-1a", 2), ("us-east-1c", 2)]
    assert result["canary_domain"] == "us-east-1b"


def test_missing_image_flags_only_the_nodes_lacking_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.txt"
    ledger.write_text("# built images\n550-5.15.0-105-generic-ubuntu22.04\n"
                      "nvcr.io/nvidia/driver:550-5.15.0-113-generic-ubuntu22.04  # full reference\n")
    code, result = plan(tmp_path, capsys, "missing-image", extra=["--ledger", str(ledger)])
    assert code == 1
    missing = findings(result, "missing-driver-image")
    assert [(f["node"], f["severity"]) for f in missing] == [("gpu-a-02", "blocking")]
    assert "550-5.15.0-119-generic-ubuntu22.04" in missing[0]["message"]
    assert node(result, "gpu-a-02")["image_in_ledger"] is False
    assert node(result, "gpu-a-01")["image_in_ledger"] is True


def test_pdb_that_allows_nothing_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, result = plan(tmp_path, capsys, "pdb-blocked")
    assert code == 1
    blocked = findings(result, "pdb-blocks-eviction")
    assert [f["node"] for f in blocked] == ["gpu-a-01"]
    assert "ml-training/critical-finetune" in blocked[0]["message"]
    assert "allows 0" in blocked[0]["message"]


def test_several_pods_of_one_budget_on_one_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def second_triton_on_b01(cluster: EmulatedCluster) -> None:
        pods = cluster.type("pods")
        template = cluster.store.get(pods, "inference", "triton-2")
        clone = {"metadata": {"name": "triton-extra", "labels": template["metadata"]["labels"],
                              "ownerReferences": template["metadata"]["ownerReferences"]},
                 "spec": {**template["spec"], "nodeName": "gpu-b-01"}, "status": template["status"]}
        cluster.store.create(pods, "inference", clone)
        pdbs = cluster.type("poddisruptionbudgets", "policy")
        cluster.store.patch(pdbs, "inference", "triton", "application/merge-patch+json",
                            {"spec": {"minAvailable": None, "maxUnavailable": 1}})

    code, result = plan(tmp_path, capsys, craft=second_triton_on_b01)
    assert code == 1
    blocked = findings(result, "pdb-blocks-eviction")
    assert [f["node"] for f in blocked] == ["gpu-b-01"]
    assert "needs 2 disruption(s) of PodDisruptionBudget inference/triton, which allows 1" in blocked[0]["message"]


def test_jobs_the_upgrade_waits_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = {"waitForCompletion": {"podSelector": "app=batch-eval", "timeoutSeconds": 600}}
    code, result = plan(tmp_path, capsys, "stuck-job", policy=policy)
    waits = findings(result, "wait-for-jobs")
    assert code == 0 and {f["severity"] for f in waits} == {"warning"}
    stuck = [f for f in waits if f["node"] == "gpu-a-01"]
    assert stuck and "batch/stuck-eval-" in stuck[0]["message"] and "600s" in stuck[0]["message"]


def _annotate_pod(ns: str, name: str, annotations: dict[str, Any]) -> Craft:
    def craft(cluster: EmulatedCluster) -> None:
        cluster.store.patch(cluster.type("pods"), ns, name, "application/merge-patch+json",
                            {"metadata": {"annotations": annotations}})
    return craft


@pytest.mark.parametrize(("annotations", "words"), [
    ({"gpu-upgrader.io/cuda-runtime": "13.0"}, "CUDA 13"),
    ({"gpu-upgrader.io/cuda-runtime": "12.8", "gpu-upgrader.io/ptx-jit": "true"}, "PTX"),
    ({"gpu-upgrader.io/cuda-runtime": "13.99"}, "--floor 13.99=DRIVER"),
    ({"gpu-upgrader.io/cuda-runtime": "14.0"}, "CUDA 14"),
    ({"gpu-upgrader.io/cuda-runtime": "twelve"}, "twelve"),
])
def test_cuda_incompatible_workloads(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     annotations: dict[str, str], words: str) -> None:
    code, result = plan(tmp_path, capsys, craft=_annotate_pod("inference", "triton-3", annotations))
    assert code == 1
    bad = findings(result, "cuda-incompatible")
    assert [(f["node"], f["severity"]) for f in bad] == [("gpu-b-02", "blocking")]
    assert "inference/triton-3" in bad[0]["message"] and words in bad[0]["message"]


def test_a_ptx_workload_on_the_cuda_its_target_driver_shipped_with_is_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14: 550.90.07 is above 12.4's toolkit driver 550.54.14, so a CUDA 12.4 PTX workload runs
    under backward compatibility; CUDA 12.8 (toolkit driver 570.26) would be minor-version, without PTX JIT."""
    ptx = {"gpu-upgrader.io/cuda-runtime": "12.4", "gpu-upgrader.io/ptx-jit": "true"}
    code, result = plan(tmp_path, capsys, craft=_annotate_pod("inference", "triton-3", ptx))
    assert findings(result, "cuda-incompatible") == [] and code == 0
    newer = {**ptx, "gpu-upgrader.io/cuda-runtime": "12.8"}
    code, result = plan(tmp_path, capsys, craft=_annotate_pod("inference", "triton-3", newer))
    [bad] = findings(result, "cuda-incompatible")
    assert code == 1 and "below 570.26, the toolkit driver of CUDA 12.8 GA (12.8.0)" in bad["message"]


def test_plan_floor_pins_a_release_the_table_lacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unlisted = _annotate_pod("inference", "triton-3", {"gpu-upgrader.io/cuda-runtime": "12.99"})
    code, result = plan(tmp_path, capsys, craft=unlisted)
    [bad] = findings(result, "cuda-incompatible")
    assert code == 1 and "--floor 12.99=DRIVER" in bad["message"]
    code, result = plan(tmp_path, capsys, craft=unlisted, extra=["--floor", "12.99=550.90.07"])
    assert findings(result, "cuda-incompatible") == [] and code == 0
    needs = {"gpu-upgrader.io/cuda-runtime": "12.99", "gpu-upgrader.io/ptx-jit": "true"}
    ptx = _annotate_pod("inference", "triton-3", needs)
    code, result = plan(tmp_path, capsys, craft=ptx, extra=["--floor", "12.99=551"])
    [bad] = findings(result, "cuda-incompatible")
    assert code == 1 and "below 551, the pinned toolkit driver of CUDA 12.99, but PTX JIT" in bad["message"]


def test_plan_floor_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listing = tmp_path / "fleet.json"
    listing.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
    base = ["plan", "--dry-run", "--from-file", str(listing)]
    with pytest.raises(SystemExit) as exit_:
        main([*base, "--floor", "12.4=500"])
    assert exit_.value.code == 2
    assert "argument --floor: floor '12.4=500' is below 525" in capsys.readouterr().err
    assert main([*base, "--floor", "12.99=560", "--floor", "12.99=561"]) == 2
    assert "--floor: floor '12.99=561': CUDA 12.99 already has floor 560" in capsys.readouterr().err


def test_cuda_12_without_ptx_jit_is_fine_on_550(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, result = plan(tmp_path, capsys)
    assert findings(result, "cuda-incompatible") == [] and code == 0


def test_required_node_affinity_on_the_driver_major(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def pin_to_535(cluster: EmulatedCluster) -> None:
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/cuda.driver.major", "operator": "In", "values": ["535"]}]}]}}}
        cluster.store.patch(cluster.type("pods"), "ml-training", "llm-pretrain-0", "application/merge-patch+json",
                            {"spec": {"affinity": affinity}})

    code, result = plan(tmp_path, capsys, craft=pin_to_535)
    bad = findings(result, "cuda-incompatible")
    assert code == 1 and [f["node"] for f in bad] == ["gpu-a-01"]
    assert "ml-training/llm-pretrain-0" in bad[0]["message"]


def test_profiles_qualify_by_node_selector_and_expiry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = ROOT / "policies" / "profiles.example.yaml"
    code, result = plan(tmp_path, capsys, extra=["--profiles", str(example)])
    unqualified = {f["node"]: f["message"] for f in findings(result, "unqualified-profile")}
    assert code == 1
    # Kernel 113 nodes are qualified for both products; kernel 105 nodes are not (one expired, one missing).
    kernels = {n["name"]: n["target_image"] for n in result["nodes"]}
    for name, image in kernels.items():
        assert (name in unqualified) == ("5.15.0-105-generic" in image), (name, image)
    assert any("expired" in m for m in unqualified.values())


def test_conflicting_nvidiadriver_selectors_on_real_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def two_drivers(cluster: EmulatedCluster) -> None:
        for name, selector in (("serve-pool", {"node.kubernetes.io/instance-type": "p5.48xlarge"}),
                               ("branch-535", {"nvidia.com/cuda.driver.major": "535"})):
            cluster.create("nvidiadrivers", {"metadata": {"name": name},
                                             "spec": {"driverType": "gpu", "nodeSelector": selector}},
                           group="nvidia.com", version="v1alpha1")

    code, result = plan(tmp_path, capsys, craft=two_drivers)
    conflicts = findings(result, "conflicting-node-selector")
    p5 = sorted(n["name"] for n in result["nodes"] if n["name"] in {"gpu-a-01", "gpu-a-02", "gpu-c-01", "gpu-c-02"})
    assert code == 1
    flagged = sorted(f["node"] for f in conflicts)
    assert flagged and set(flagged) <= set(p5)
    assert all("branch-535" in f["message"] and "serve-pool" in f["message"] for f in conflicts)


def _label(labels: dict[str, str]) -> Craft:
    def craft(cluster: EmulatedCluster) -> None:
        cluster.store.patch(cluster.type("nodes"), None, "gpu-b-01", "application/merge-patch+json",
                            {"metadata": {"labels": labels}})
    return craft


def _kernel_reported(kernel: str) -> Craft:
    def craft(cluster: EmulatedCluster) -> None:
        cluster.store.mutate(cluster.type("nodes"), None, "gpu-b-01",
                             lambda n: n["status"]["nodeInfo"].__setitem__("kernelVersion", kernel))
    return craft


@pytest.mark.parametrize(("craft", "words"), [
    (_label({"nvidia.com/cuda.driver.major": "abc"}), "not a version"),
    (_kernel_reported("5.15.0-999-generic"), "stale Node Feature Discovery label"),
    (_kernel_reported("unknown kernel"), "kernel"),
    (_label({"nvidia.com/gpu-driver-upgrade-state": "half-done"}), "unknown upgrade state"),
], ids=["driver-label", "kernel-disagrees", "kernel-garbage", "state-label"])
def test_invalid_node_data_is_refused_not_guessed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   craft: Craft, words: str) -> None:
    code, result = plan(tmp_path, capsys, craft=craft)
    invalid = findings(result, "invalid-node-data")
    assert code == 1
    assert [f["node"] for f in invalid] == ["gpu-b-01"]
    assert words in invalid[0]["message"]


@pytest.mark.parametrize(("content", "words"), [
    ('{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Node", "metadata": {"na', "not valid JSON"),
    ("items: [", "not valid JSON or YAML"),
    ('{"kind": "List"}', "expected a kubectl List"),
    ('{"kind": "List", "items": [{"metadata": {"name": "x"}}]}', "item 0 has no kind"),
    ('{"kind": "List", "items": [{"kind": "Node", "metadata": {}}]}', "item 0 (Node) has no metadata.name"),
    ('{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}', "no Node objects"),
    ('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n", "labels": ["a"]}}]}', "not a map"),
])
def test_bad_input_files_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 content: str, words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    code = main(["plan", "--dry-run", "--from-file", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("upgrader: error: ") and words in err and err.count("\n") == 1


@pytest.mark.parametrize(("args", "words"), [
    (["--ledger", "/nonexistent/ledger"], "--ledger"),
    (["--profiles", "/nonexistent/profiles"], "--profiles"),
    (["--target-driver", "5x0"], "--target-driver"),
    (["--policy", "/nonexistent.yaml"], "no such file"),
])
def test_bad_flags_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str) -> None:
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy")
    listing = tmp_path / "fleet.json"
    listing.write_text(json.dumps(export(cluster)))
    code = main(["plan", "--dry-run", "--from-file", str(listing), *args])
    err = capsys.readouterr().err
    assert code == 2 and words in err and err.count("\n") == 1


def test_plan_requires_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--from-file", "x.json"])
    assert exit_info.value.code == 2
    assert "--dry-run" in capsys.readouterr().err


def test_target_driver_override_and_yaml_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy")
    listing = tmp_path / "fleet.yaml"
    listing.write_text(yaml.safe_dump(export(cluster)))
    assert main(["plan", "--dry-run", "--from-file", str(listing), "--target-driver", "570.86.15", "-o", "yaml"]) == 0
    result = yaml.safe_load(capsys.readouterr().out)
    assert {n["target_driver"] for n in result["nodes"]} == {"570.86.15"}
    assert node(result, "gpu-a-01")["target_image"] == "570-5.15.0-105-generic-ubuntu22.04"


def test_table_output_reads_in_one_screen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = EmulatedCluster.virtual()
    build(cluster, "pdb-blocked")
    listing = tmp_path / "fleet.json"
    listing.write_text(json.dumps(export(cluster)))
    assert main(["plan", "--dry-run", "--from-file", str(listing)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PLAN (dry run): 6 of 6 nodes to upgrade")
    assert out[1] == "BUDGETS: maxParallelUpgrades 1, maxUnavailable 25% of 6 nodes = 2, soak 0s between domains"
    assert out[2] == "FINDINGS: 1 blocking, 0 warnings"
    assert out[3].split()[:3] == ["BLOCKING", "pdb-blocks-eviction", "gpu-a-01"]
    assert len(out) < 40


def test_a_node_selected_by_two_driver_daemonsets_is_a_blocking_finding(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 11: each DaemonSet's driver pod replaces the other's, forever; plan says so, per node."""
    copied: list[str] = []

    def second_daemonset(cluster: EmulatedCluster) -> None:
        ds_type = cluster.type("daemonsets", "apps")
        original = next(d for d in cluster.store.objects(ds_type, "gpu-operator")
                        if d["metadata"]["labels"].get("app") == "nvidia-driver-daemonset")
        copied.append(original["metadata"]["name"])
        twin = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "nvidia-driver-twin", "labels": dict(original["metadata"]["labels"])},
                "spec": original["spec"]}
        cluster.create("daemonsets", twin, "gpu-operator", group="apps")

    code, result = plan(tmp_path, capsys, craft=second_daemonset)
    conflicts = findings(result, "conflicting-driver-daemonsets")
    assert code == 1 and conflicts
    for finding in conflicts:
        assert finding["severity"] == "blocking"
        assert node(result, finding["node"])["action"] == "invalid"
        assert finding["message"] == (
            f"selected by 2 driver DaemonSets ({', '.join(sorted([copied[0], 'nvidia-driver-twin']))}): their "
            "driver pods would replace each other; make their node selectors exclusive")
    assert not findings(result, "invalid-node-data")


def _already_current(cluster: EmulatedCluster) -> None:
    """gpu-a-01's driver pod runs its DaemonSet's newest revision (550.90.07): it is up to date."""
    pods = cluster.type("pods")
    pod = next(
        p for p in cluster.store.objects(pods)
        if p["spec"].get("nodeName") == "gpu-a-01" and p["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"
    )
    owner = pod["metadata"]["ownerReferences"][0]["uid"]
    revisions = [
        r for r in cluster.store.objects(cluster.type("controllerrevisions", "apps"))
        if r["metadata"]["ownerReferences"][0]["uid"] == owner
    ]
    newest = max(revisions, key=lambda r: r["revision"])["metadata"]["labels"]["controller-revision-hash"]
    cluster.store.patch(pods, pod["metadata"]["namespace"], pod["metadata"]["name"], "application/merge-patch+json",
                        {"metadata": {"labels": {"controller-revision-hash": newest}}})
    driver = {"nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "90",
              "nvidia.com/cuda.driver.rev": "07"}
    cluster.store.patch(cluster.type("nodes"), None, "gpu-a-01", "application/merge-patch+json",
                        {"metadata": {"labels": driver}})


def test_target_driver_judges_nodes_already_on_the_current_revision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rollback runbook's image check: `--target-driver` the previous driver, and every node whose
    driver would change is judged, the ones up to date on the DaemonSet's revision included."""
    ledger = tmp_path / "images.txt"
    ledger.write_text("535-5.15.0-113-generic-ubuntu22.04\n")  # the rollback image for kernel 105 is missing
    code, result = plan(tmp_path, capsys, craft=_already_current,
                        extra=["--target-driver", "535.161.08", "--ledger", str(ledger)])
    a01 = node(result, "gpu-a-01")
    assert a01["action"] == "up-to-date"
    assert a01["target_image"] == "535-5.15.0-105-generic-ubuntu22.04"
    assert a01["image_in_ledger"] is False
    assert [f["kind"] for f in a01["findings"]] == ["missing-driver-image"]
    assert code == 1
