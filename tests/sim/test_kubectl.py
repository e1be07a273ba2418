"""End to end: the real kubectl against `upgrader sim serve` running as a subprocess.

Every assertion is on what kubectl prints (columns and values a user sees) or on the serve
command's own output, never on emulator internals. Servers are started per scenario need:
one read-only `pdb-blocked` server and one `healthy` server (whose tests each touch a different
node) per module, and a fresh server for each drain and for the audit log. The harness and its
fixtures are in kubectl_harness.py; the DaemonSet and watch tests in test_kubectl_daemonsets.py.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest

from tests.sim.kubectl_harness import (
    DRIVER_DS_OF_NODE,
    NODES,
    OPERATOR_NS,
    PDB_REFUSAL,
    STATE_LABEL,
    Sim,
    StartSim,
    _env,
    _upgrader,
    by,
    headers,
    parse_tables,
)
from tests.sim.kubectl_harness import blocked as blocked
from tests.sim.kubectl_harness import blocked_info as blocked_info
from tests.sim.kubectl_harness import healthy as healthy
from tests.sim.kubectl_harness import healthy_info as healthy_info
from tests.sim.kubectl_harness import kubectl_bin as kubectl_bin
from tests.sim.kubectl_harness import sim_factory as sim_factory
from upgrader.sim.fleets.scenarios import ScenarioInfo

pytestmark = pytest.mark.kubectl


# ----- 1. nodes and the upgrade-state column ------------------------------------------------


def test_nodes_show_upgrade_state_column_and_a_new_label(healthy: Sim, healthy_info: ScenarioInfo) -> None:
    assert healthy_info.nodes == NODES
    text = healthy.ok("get", "nodes", "-L", STATE_LABEL)
    assert headers(text) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "GPU-DRIVER-UPGRADE-STATE"]
    rows = parse_tables(text)[0]
    assert [r["NAME"] for r in rows] == NODES
    for row in rows:
        assert (row["STATUS"], row["ROLES"], row["VERSION"]) == ("Ready", "<none>", "v1.32.4"), row
        assert row["GPU-DRIVER-UPGRADE-STATE"] == "", row
        assert re.fullmatch(r"(\d+[smhdy])+", row["AGE"]), row

    labeled = healthy.ok("label", "node", "gpu-b-01", f"{STATE_LABEL}=upgrade-required")
    assert labeled == "node/gpu-b-01 labeled\n"

    after = by(healthy.get("nodes", "-L", STATE_LABEL), "NAME")
    assert list(after) == NODES
    assert {n: r["GPU-DRIVER-UPGRADE-STATE"] for n, r in after.items()} == {
        n: "upgrade-required" if n == "gpu-b-01" else "" for n in NODES
    }


# ----- 2. pods, wide ------------------------------------------------------------------------


def test_pods_wide_show_one_running_driver_pod_per_node(blocked: Sim, blocked_info: ScenarioInfo) -> None:
    text = blocked.ok("get", "pods", "-A", "-o", "wide")
    assert headers(text) == [
        "NAMESPACE",
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED NODE",
        "READINESS GATES",
    ]
    rows = parse_tables(text)[0]
    drivers = [r for r in rows if r["NAME"].startswith("nvidia-driver-daemonset-")]
    assert sorted(r["NODE"] for r in drivers) == NODES, drivers
    for row in drivers:
        assert row["NAMESPACE"] == OPERATOR_NS, row
        assert row["NAME"].startswith(DRIVER_DS_OF_NODE[row["NODE"]] + "-"), row
        assert (row["READY"], row["STATUS"], row["RESTARTS"]) == ("1/1", "Running", "0"), row
    # The workloads are there too, each on its node.
    named = {(r["NAMESPACE"], r["NAME"]): r for r in rows}
    assert named[("ml-training", "critical-finetune-0")]["NODE"] == blocked_info.blocked_node == "gpu-a-01"
    assert [named[("inference", f"triton-{i}")]["NODE"] for i in range(6)] == NODES
    validators = sorted(r["NODE"] for r in rows if r["NAME"].startswith("nvidia-operator-validator-"))
    assert validators == NODES


# ----- 3. PodDisruptionBudgets --------------------------------------------------------------


def _ready_and_total(sim: Sim, namespace: str, selector: str) -> tuple[int, int]:
    rows = sim.get("pods", "-n", namespace, "-l", selector)
    ready = sum(1 for r in rows if r["READY"] == "1/1" and r["STATUS"] == "Running")
    return ready, len(rows)


def test_pdb_allowed_disruptions(blocked: Sim, blocked_info: ScenarioInfo) -> None:
    assert blocked_info.blocking_pdb == "ml-training/critical-finetune"
    text = blocked.ok("get", "pdb", "-A")
    assert headers(text) == [
        "NAMESPACE",
        "NAME",
        "MIN AVAILABLE",
        "MAX UNAVAILABLE",
        "ALLOWED DISRUPTIONS",
        "AGE",
    ]
    pdbs = {(r["NAMESPACE"], r["NAME"]): r for r in parse_tables(text)[0]}
    assert set(pdbs) == {
        ("ml-training", "critical-finetune"),
        ("ml-training", "llm-pretrain"),
        ("inference", "triton"),
        ("web", "api-gateway"),
    }
    # The budgets the scenario declares, as kubectl shows them.
    specs = {
        ("ml-training", "critical-finetune"): ("1", "N/A"),
        ("ml-training", "llm-pretrain"): ("N/A", "1"),
        ("inference", "triton"): ("50%", "N/A"),
        ("web", "api-gateway"): ("N/A", "1"),
    }
    for key, (min_available, max_unavailable) in specs.items():
        assert (pdbs[key]["MIN AVAILABLE"], pdbs[key]["MAX UNAVAILABLE"]) == (min_available, max_unavailable)

    # Allowed disruptions worked out by hand from the pods kubectl lists.
    expected = {}
    for (ns, name), (min_available, max_unavailable) in specs.items():
        ready, total = _ready_and_total(blocked, ns, f"app={name}")
        if max_unavailable != "N/A":
            desired = total - int(max_unavailable)
        elif min_available.endswith("%"):
            desired = math.ceil(int(min_available[:-1]) * total / 100)
        else:
            desired = int(min_available)
        expected[(ns, name)] = str(max(0, ready - desired))
    assert {k: r["ALLOWED DISRUPTIONS"] for k, r in pdbs.items()} == expected
    # ...which, for this scenario, are these numbers.
    assert expected == {
        ("ml-training", "critical-finetune"): "0",  # minAvailable 1 of its 1 pod
        ("ml-training", "llm-pretrain"): "1",  # maxUnavailable 1
        ("inference", "triton"): "3",  # 6 ready, minAvailable 50% -> 3
        ("web", "api-gateway"): "1",  # maxUnavailable 1
    }


# ----- 4. cordon / uncordon -----------------------------------------------------------------


def test_cordon_and_uncordon(healthy: Sim) -> None:
    node = "gpu-b-02"
    assert healthy.get("node", node)[0]["STATUS"] == "Ready"
    assert healthy.ok("cordon", node) == f"node/{node} cordoned\n"
    assert healthy.get("node", node)[0]["STATUS"] == "Ready,SchedulingDisabled"
    assert healthy.ok("uncordon", node) == f"node/{node} uncordoned\n"
    assert healthy.get("node", node)[0]["STATUS"] == "Ready"


def test_a_bad_label_fails_as_on_a_real_cluster_and_leaves_the_node_alone(healthy: Sim) -> None:
    """kubectl checks a label value itself; a key, and anything a patch carries, the API server
    checks: kubectl prints its 422 answer as it prints a real cluster's."""
    node = "gpu-b-01"
    before = healthy.ok("get", "node", node, "-o", "jsonpath={.metadata.labels}")
    value_rule = (
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
        "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    )
    name_rule = (
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
        "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    )
    invalid = f'The Node "{node}" is invalid: metadata.labels: Invalid value: '
    long_value = "a" * 64
    refused = {
        ("label", "node", node, "note=a\nb"): f'error: invalid label value: "note=a\\nb": {value_rule}\n',
        ("label", "node", node, f"note={long_value}"): (
            f'error: invalid label value: "note={long_value}": must be no more than 63 characters\n'
        ),
        ("label", "node", node, "bad key=v"): f'{invalid}"bad key": {name_rule}\n',
        ("patch", "node", node, "-p", '{"metadata":{"labels":{"note":"a\\nb"}}}'): f'{invalid}"a\\nb": {value_rule}\n',
        ("patch", "node", node, "--type=merge", "-p", f'{{"metadata":{{"labels":{{"note":"{long_value}"}}}}}}'): (
            f'{invalid}"{long_value}": must be no more than 63 characters\n'
        ),
    }
    for args, stderr in refused.items():
        result = healthy.kubectl(*args)
        assert (result.returncode, result.stdout, result.stderr) == (1, "", stderr), args
    assert healthy.ok("get", "node", node, "-o", "jsonpath={.metadata.labels}") == before


# ----- 5. drain -----------------------------------------------------------------------------


def test_drain_blocked_by_pdb_fails_and_keeps_the_pod(
    sim_factory: StartSim, blocked_info: ScenarioInfo
) -> None:
    sim = sim_factory("pdb-blocked")
    node = "gpu-a-01"
    assert blocked_info.blocked_node == node
    before = {r["NAME"] for r in sim.get("pods", "-A", "--field-selector", f"spec.nodeName={node}")}
    assert "critical-finetune-0" in before

    result = sim.kubectl(
        "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=6s", timeout=40
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert PDB_REFUSAL in output
    refusals = [line for line in result.stderr.splitlines() if PDB_REFUSAL in line]
    assert refusals, output
    for line in refusals:
        assert line == (
            'error when evicting pods/"critical-finetune-0" -n "ml-training" (will retry after 5s): '
            + PDB_REFUSAL
        ), line
    assert f"node/{node} cordoned" in result.stdout
    assert f"node/{node} drained" not in output
    # The pods no budget protects were evicted on the way.
    for pod in ("triton-0", "api-gateway-0", "llm-pretrain-0"):
        assert f"pod/{pod} evicted" in result.stdout, output

    kept = sim.get("pod", "-n", "ml-training", "critical-finetune-0")
    assert [(p["NAME"], p["READY"], p["STATUS"]) for p in kept] == [("critical-finetune-0", "1/1", "Running")]
    assert sim.get("node", node)[0]["STATUS"] == "Ready,SchedulingDisabled"
    pdb = sim.get("pdb", "-n", "ml-training", "critical-finetune")
    assert pdb[0]["ALLOWED DISRUPTIONS"] == "0"


def test_drain_free_node_leaves_only_daemonset_pods(sim_factory: StartSim) -> None:
    sim = sim_factory("pdb-blocked")
    node = "gpu-c-01"
    selector = f"spec.nodeName={node}"
    owners = (
        "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,"
        "OWNER:.metadata.ownerReferences[0].kind"
    )
    before = parse_tables(sim.ok("get", "pods", "-A", "--field-selector", selector, "-o", owners))[0]
    evictable = sorted(r["NAME"] for r in before if r["OWNER"] != "DaemonSet")
    assert evictable == ["api-gateway-4", "llm-pretrain-4", "triton-4"], before

    result = sim.kubectl(
        "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s", timeout=60
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"node/{node} drained" in result.stdout.splitlines(), output
    for pod in evictable:
        assert f"pod/{pod} evicted" in result.stdout, output
    assert "error" not in output.lower(), output

    text = sim.ok("get", "pods", "-A", "--field-selector", selector)
    left = parse_tables(text)[0]
    assert sorted((r["NAMESPACE"], r["NAME"].rsplit("-", 1)[0]) for r in left) == [
        ("gpu-operator", "nvidia-device-plugin-daemonset"),
        ("gpu-operator", DRIVER_DS_OF_NODE[node]),
        ("gpu-operator", "nvidia-operator-validator"),
        ("monitoring", "node-exporter"),
    ], text
    after = parse_tables(sim.ok("get", "pods", "-A", "--field-selector", selector, "-o", owners))[0]
    assert {r["OWNER"] for r in after} == {"DaemonSet"}, after
    assert sim.get("node", node)[0]["STATUS"] == "Ready,SchedulingDisabled"


# ----- 7. audit log -------------------------------------------------------------------------


def test_audit_log_has_one_json_object_per_request(sim_factory: StartSim, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    sim = sim_factory("healthy", "--audit-log", str(audit))
    assert sim.get("node", "gpu-a-01")[0]["NAME"] == "gpu-a-01"
    missing = sim.kubectl("get", "node", "no-such-node")
    assert missing.returncode == 1
    assert missing.stderr.strip() == 'Error from server (NotFound): nodes "no-such-node" not found'

    text = audit.read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]
    assert records and all(isinstance(r, dict) for r in records)
    for record in records:
        assert {"verb", "path", "status", "method"} <= set(record), record
    calls = [(r["method"], r["verb"], r["path"], r["status"]) for r in records]
    assert ("GET", "", "/version", 200) in calls
    assert ("GET", "get", "/api/v1/nodes/gpu-a-01", 200) in calls
    assert ("GET", "get", "/api/v1/nodes/no-such-node", 404) in calls
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))


# ----- 8. bad arguments to `upgrader sim serve` ---------------------------------------------


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        (["--scenario", "no-such-scenario"], "no-such-scenario"),
        (["--nodes", "0"], "'0'"),
        (["--nodes", "abc"], "'abc'"),
        (["--nodes", "2"], "at least 3"),
        (["--port", "70000"], "70000"),
        (["--kubeconfig", "{tmp}/missing-dir/kubeconfig"], "missing-dir"),
        (["--kubeconfig", "{tmp}"], "is a directory"),
        ([], "--kubeconfig"),
    ],
    ids=[
        "unknown-scenario",
        "nodes-0",
        "nodes-abc",
        "nodes-2",
        "port-70000",
        "kubeconfig-missing-dir",
        "kubeconfig-is-dir",
        "kubeconfig-missing",
    ],
)
def test_serve_rejects_bad_arguments_in_one_line(args: list[str], mentions: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if not any(a == "--kubeconfig" for a in argv) and args:
        argv += ["--kubeconfig", str(kubeconfig)]
    result = subprocess.run(
        [*_upgrader(), "sim", "serve", *argv], capture_output=True, text=True, timeout=20, env=_env()
    )
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("upgrader: error: "), lines[0]
    assert mentions in lines[0], lines[0]
    assert result.stdout == ""
    assert not kubeconfig.exists()
