"""End to end: the real kubectl against `upgrader sim serve` running as a subprocess.

Every assertion is on what kubectl prints (columns and values a user sees) or on the serve
command's own output, never on emulator internals. Servers are started per scenario need:
one read-only `pdb-blocked` server and one `healthy` server (whose tests each touch a different
node) per module, and a fresh server for each drain and for the audit log.
"""

from __future__ import annotations

import json
import math
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

pytestmark = pytest.mark.kubectl

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
        ("gpu-operator", DRIVER_DS_OF_NODE[node]),
        ("gpu-operator", "nvidia-operator-validator"),
        ("monitoring", "node-exporter"),
    ], text
    after = parse_tables(sim.ok("get", "pods", "-A", "--field-selector", selector, "-o", owners))[0]
    assert {r["OWNER"] for r in after} == {"DaemonSet"}, after
    assert sim.get("node", node)[0]["STATUS"] == "Ready,SchedulingDisabled"


# ----- 6. DaemonSets, ControllerRevisions, OnDelete recreation, watch -----------------------


def test_driver_daemonsets_have_revision_2_newest(blocked: Sim) -> None:
    text = blocked.ok("get", "ds,controllerrevisions", "-n", OPERATOR_NS)
    daemonsets, revisions = parse_tables(text)
    assert headers(text) == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "NODE SELECTOR",
        "AGE",
    ]
    ds_rows = by(daemonsets, "NAME")
    for ds in DRIVER_DS.values():
        row = ds_rows[f"daemonset.apps/{ds}"]
        # Three nodes per kernel, all Ready, none on the newest template yet (OnDelete).
        assert [row[c] for c in ("DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE")] == [
            "3",
            "3",
            "3",
            "0",
            "3",
        ], row
    assert list(revisions[0]) == ["NAME", "CONTROLLER", "REVISION", "AGE"]
    for ds in DRIVER_DS.values():
        owned = [r for r in revisions if r["CONTROLLER"] == f"daemonset.apps/{ds}"]
        assert sorted(int(r["REVISION"]) for r in owned) == [1, 2], owned
        assert all(r["NAME"].startswith(f"controllerrevision.apps/{ds}-") for r in owned), owned
    validator = [r for r in revisions if r["CONTROLLER"] == "daemonset.apps/nvidia-operator-validator"]
    assert [r["REVISION"] for r in validator] == ["1"]


def _revision_hashes(sim: Sim, ds: str) -> dict[int, str]:
    rows = sim.get("controllerrevisions", "-n", OPERATOR_NS)
    return {
        int(r["REVISION"]): r["NAME"].removeprefix(f"{ds}-")
        for r in rows
        if r["CONTROLLER"] == f"daemonset.apps/{ds}"
    }


def _driver_pods_on(sim: Sim, node: str) -> list[dict[str, str]]:
    result = sim.kubectl(
        "get",
        "pods",
        "-n",
        OPERATOR_NS,
        "-l",
        "app=nvidia-driver-daemonset",
        "--field-selector",
        f"spec.nodeName={node}",
        "-L",
        HASH_LABEL,
    )
    assert result.returncode == 0, result.stderr
    return parse_tables(result.stdout)[0] if result.stdout.strip() else []


def test_deleted_driver_pod_comes_back_at_newest_revision(healthy: Sim) -> None:
    node = "gpu-c-02"
    ds = DRIVER_DS_OF_NODE[node]
    hashes = _revision_hashes(healthy, ds)
    assert sorted(hashes) == [1, 2]
    (old,) = _driver_pods_on(healthy, node)
    assert old["CONTROLLER-REVISION-HASH"] == hashes[1], old
    up_to_date = by(healthy.get("ds", "-n", OPERATOR_NS), "NAME")[ds]["UP-TO-DATE"]
    assert up_to_date == "0"

    assert healthy.ok("delete", "pod", "-n", OPERATOR_NS, old["NAME"]) == f'pod "{old["NAME"]}" deleted\n'

    deadline = time.monotonic() + 10
    seen: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        seen = _driver_pods_on(healthy, node)
        replaced = [p for p in seen if p["NAME"] != old["NAME"]]
        if len(seen) == 1 and [(p["READY"], p["STATUS"]) for p in replaced] == [("1/1", "Running")]:
            break
        time.sleep(0.25)
    else:
        pytest.fail(f"no new Ready driver pod on {node} within 10 s; last seen: {seen}")
    (new,) = seen
    assert new["NAME"].startswith(f"{ds}-"), new
    assert new["CONTROLLER-REVISION-HASH"] == hashes[2], new
    assert by(healthy.get("ds", "-n", OPERATOR_NS), "NAME")[ds]["UP-TO-DATE"] == "1"


def test_rollout_undo_makes_the_old_revision_newest_again(sim_factory: StartSim) -> None:
    """`kubectl rollout undo` re-applies revision 1's template: the DaemonSet controller reuses that
    ControllerRevision (same hash, renumbered 3), so the driver pods still on it are up to date."""
    sim = sim_factory("healthy")
    ds = DRIVER_DS["105"]
    hashes = _revision_hashes(sim, ds)
    assert sorted(hashes) == [1, 2]
    assert sim.ok("rollout", "undo", f"ds/{ds}", "-n", OPERATOR_NS) == f"daemonset.apps/{ds} rolled back\n"
    assert _revision_hashes(sim, ds) == {2: hashes[2], 3: hashes[1]}
    assert by(sim.get("ds", "-n", OPERATOR_NS), "NAME")[ds]["UP-TO-DATE"] == "3"
    history = sim.ok("rollout", "history", f"ds/{ds}", "-n", OPERATOR_NS, "--revision=3")
    assert "Image:\tnvcr.io/nvidia/driver:535-5.15.0-105-generic-ubuntu22.04" in history, history


def test_watch_prints_a_label_change(healthy: Sim) -> None:
    node, label = "gpu-a-02", "example.com/poked"
    watch = subprocess.Popen(
        healthy.argv("get", "node", node, "-w", "-L", label, "--request-timeout=4s"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert watch.stdout is not None
        first = [watch.stdout.readline(), watch.stdout.readline()]  # header, then the node as it is
        assert first[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "POKED"], first
        assert first[1].split()[:2] == [node, "Ready"] and len(first[1].split()) == 5, first
        assert healthy.ok("label", "node", node, f"{label}=yes") == f"node/{node} labeled\n"
        rest, err = watch.communicate(timeout=15)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 0, err
    assert [line.split() for line in rest.splitlines()][-1][:2] == [node, "Ready"], rest
    assert rest.splitlines()[-1].split()[-1] == "yes", rest


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
