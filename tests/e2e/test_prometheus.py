"""A real Prometheus scrapes two `upgrader run` replicas through a halt and two leader changes to Done;
every dashboard query and every alert is then evaluated in it.

The handovers: the leader is cut off from the API server (alive and scraped, its Lease expires and
the other replica takes over), then the new leader is stopped with SIGTERM (it releases the Lease
and the first takes over at once, while the stopped one's last samples linger until its next
scrape fails).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from tests.prometheus_tools import ROOT, Prometheus, binary, free_port, write_rules
from upgrader.controller.metrics import transition_pairs
from upgrader.core.model.states import STATE_LABEL, UNLABELLED
from upgrader.sim.apiserver.kubeconfig import write_kubeconfig
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.scenarios import ScenarioInfo, build

from .conftest import FAST_POLICY, FAST_SIM
from .partition import PartitionProxy

NODES = 6
LEASE = ("gpu-driver-upgrader", "gpu-operator")
STATUS = ("gpu-driver-upgrade-status", "gpu-operator")
DASHBOARD = ROOT / "deploy" / "grafana" / "upgrader-dashboard.json"
STEP = 0.25  # finer than the 1 s scrape: a double count at a handover cannot fall between steps


@dataclass
class Replica:
    name: str
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Fleet:
    cluster: EmulatedCluster
    info: ScenarioInfo
    prometheus: Prometheus
    proxy: PartitionProxy
    replicas: dict[str, Replica] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)
    done_at_release: int = 0

    def holder(self) -> str:
        lease = self.cluster.get("leases", LEASE[0], LEASE[1], "coordination.k8s.io")
        return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

    def phase(self) -> str:
        cm = self.cluster.get("configmaps", STATUS[0], STATUS[1]) or {}
        return str((cm.get("data") or {}).get("phase") or "")

    def states(self) -> list[str]:
        return [((self.cluster.get("nodes", n) or {}).get("metadata", {}).get("labels") or {}).get(STATE_LABEL, "")
                for n in self.info.nodes]

    def mark(self, name: str) -> None:
        self.marks[name] = time.time()


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def spawn(tmp: Path, name: str, server: str, port: int) -> Replica:
    kubeconfig = write_kubeconfig(tmp / f"{name}.kubeconfig", server)
    env = {**os.environ, "UPGRADER_IDENTITY": name, "UPGRADER_REQUEUE_SECONDS": "0.2",
           "UPGRADER_LEASE_DURATION_SECONDS": "3"}
    with (tmp / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "upgrader.commands.cli", "run", "--kubeconfig", str(kubeconfig),
                                 "--policy", str(tmp / "policy.yaml"), "--metrics-port", str(port)],
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    return Replica(name, port, proc)


@pytest.fixture(scope="module")
def rollout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    binary("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus-e2e")
    # One node at a time: the rollout is still going when the second leader change comes.
    (tmp / "policy.yaml").write_text(yaml.safe_dump({**FAST_POLICY, "maxParallelUpgrades": 1}))
    cluster = EmulatedCluster(settings=SimSettings(**FAST_SIM))
    info = build(cluster, "pdb-blocked", NODES, job_seconds=1.5)
    url = cluster.serve()
    proxy = PartitionProxy(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    ports = {"replica-a": free_port(), "replica-b": free_port()}
    # replica-b is scraped every 5 s: stopped right after a scrape, its last sample as the leader
    # stays the latest Prometheus has of it for seconds after replica-a took over.
    targets = {f"127.0.0.1:{ports['replica-a']}": "1s", f"127.0.0.1:{ports['replica-b']}": "5s"}
    prometheus = Prometheus(tmp, targets, write_rules(tmp), labels={"namespace": "upgrader-system"})
    fleet = Fleet(cluster, info, prometheus, proxy)
    try:
        play(fleet, tmp, url, ports)
        yield fleet
    finally:
        for replica in fleet.replicas.values():
            if replica.proc.poll() is None:
                replica.proc.kill()
                replica.proc.wait(timeout=10)
        prometheus.stop()
        proxy.close()
        cluster.stop()


def play(fleet: Fleet, tmp: Path, url: str, ports: dict[str, int]) -> None:
    # Ready is not scraping: Prometheus hands its scrape loops their targets on a 5 s tick, and the
    # halt comes about 5 s into the story. Wait until both targets have been tried (`up` 0: nothing
    # listens yet), or the first marks can fall before the first scrape.
    wait_for("Prometheus to scrape both targets", lambda: len(fleet.prometheus.instant("up")) == 2, timeout=30)
    fleet.mark("start")
    assert set(fleet.states()) == {""}, "the fleet starts unlabelled: its first labelling is counted"
    # replica-a reaches the API server through the proxy, to be cut off from it later
    a = fleet.replicas["a"] = spawn(tmp, "replica-a", fleet.proxy.url, ports["replica-a"])
    wait_for("replica-a to lead", lambda: fleet.holder() == "replica-a")
    fleet.replicas["b"] = spawn(tmp, "replica-b", url, ports["replica-b"])
    wait_for("the PDB to halt the rollout", lambda: fleet.phase() == "Halted")
    time.sleep(3)
    fleet.mark("halted")
    fleet.proxy.partition()  # replica-a, alive and scraped, can no longer renew its Lease
    wait_for("replica-b to take over", lambda: fleet.holder() == "replica-b", timeout=30)
    b_rollout = f'upgrader_rollout_halted{{instance="{fleet.replicas["b"].instance}"}}'
    wait_for("a scrape of replica-b as the leader", lambda: bool(fleet.prometheus.instant(b_rollout)), timeout=30)
    time.sleep(2)
    fleet.mark("partitioned")
    fleet.proxy.heal()
    time.sleep(2)
    k8s.PolicyV1Api(fleet.cluster.client()).patch_namespaced_pod_disruption_budget(
        "critical-finetune", "ml-training", {"spec": {"minAvailable": 0}}
    )
    fleet.mark("unblocked")
    blocked = fleet.info.nodes.index(fleet.info.blocked_node)
    wait_for("the blocked node to move on", lambda: fleet.states()[blocked] != "pod-deletion-required")
    fleet.mark("moving")
    time.sleep(11)  # two scrapes of each replica since: the second after the pass that saw it
    fleet.mark("running")
    b = fleet.replicas["b"]
    wait_for("a scrape of replica-b", lambda: time.time() - last_scrape(fleet, b) < 0.5, timeout=15)
    b.proc.send_signal(signal.SIGTERM)  # releases the Lease: replica-a takes over at once
    fleet.done_at_release = fleet.states().count("upgrade-done")
    wait_for("replica-a to lead again", lambda: fleet.holder() == "replica-a", timeout=30)
    fleet.mark("released")
    wait_for("the rollout to finish", lambda: fleet.phase() == "Done", timeout=120)
    fleet.mark("done")
    time.sleep(5)  # scrapes and rule evaluations after Done
    fleet.mark("end")
    assert a.proc.poll() is None, "replica-a ran to the end"


def last_scrape(fleet: Fleet, replica: Replica) -> float:
    up = fleet.prometheus.instant(f'timestamp(up{{instance="{replica.instance}"}})')
    return float(up[0]["value"][1]) if up else 0.0


# ----- the dashboard's queries -------------------------------------------------------------------

def dashboard_queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p["targets"]]


def concrete(expr: str) -> str:
    """What Grafana sends with every variable at All and a 1 s scrape interval."""
    for var, value in (("$cluster", ".*"), ("$namespace", ".*"), ("$job", ".*"), ("$__rate_interval", "4s")):
        expr = expr.replace(var, value)
    return expr


def by_step(result: list[dict[str, Any]]) -> dict[float, list[tuple[dict[str, str], float]]]:
    """{timestamp: [(labels, value)]} over every series of a range query."""
    steps: dict[float, list[tuple[dict[str, str], float]]] = {}
    for series in result:
        for t, v in series["values"]:
            steps.setdefault(float(t), []).append((series["metric"], float(v)))
    return steps


def panel(fleet: Fleet, title: str, index: int = 0) -> str:
    return concrete([e for t, e in dashboard_queries() if t == title][index])


def run_range(fleet: Fleet, expr: str, start: str = "start", end: str = "end") -> dict[float, list[Any]]:
    return by_step(fleet.prometheus.series_range(expr, fleet.marks[start], fleet.marks[end], STEP))


def test_every_dashboard_query_evaluates_and_the_figures_are_recorded(rollout: Fleet) -> None:
    at = rollout.marks["end"]
    print("\npanel | query | series over the run | value at the end")
    for title, expr in dashboard_queries():
        over_run = rollout.prometheus.series_range(concrete(expr), rollout.marks["start"], at, 1.0)
        now = rollout.prometheus.instant(concrete(expr), at)
        shown = {json.dumps(r["metric"], sort_keys=True): round(float(r["value"][1]), 3) for r in now}
        print(f"{title} | {len(over_run)} | {shown}")
        assert over_run, f"{title}: no data over the whole rollout ({expr})"


def test_nodes_per_stage_add_up_to_the_fleet_at_every_step(rollout: Fleet) -> None:
    steps = run_range(rollout, panel(rollout, "Nodes per stage"))
    assert len(steps) > 100, "the rollout was scraped all along"
    wrong = {t: sum(v for _, v in s) for t, s in steps.items() if sum(v for _, v in s) != NODES}
    assert not wrong, f"nodes per stage did not add up to {NODES} at {len(wrong)} steps: {list(wrong.items())[:5]}"
    upgraded = run_range(rollout, panel(rollout, "Nodes upgraded"))
    assert max(v for s in upgraded.values() for _, v in s) <= 1.0
    assert [v for _, v in upgraded[max(upgraded)]] == [1.0]


def test_one_phase_at_a_time_ending_done(rollout: Fleet) -> None:
    steps = run_range(rollout, panel(rollout, "Rollout phase"))
    several = {t: [m["phase"] for m, _ in s] for t, s in steps.items() if len(s) != 1}
    assert not several, f"not exactly one phase at {list(several.items())[:5]}"
    phases = [steps[t][0][0]["phase"] for t in sorted(steps)]
    assert "Halted" in phases and phases[-1] == "Done"
    halted = run_range(rollout, panel(rollout, "Halted"), "done")
    assert {v for s in halted.values() for _, v in s} == {0.0}, "halted stays 0 from Done on"
    # Once the leader saw the node move on, no replica's older view of the halt shows again.
    moved_on = {s[0][0]["phase"] for s in run_range(rollout, panel(rollout, "Rollout phase"), "running").values()}
    assert moved_on <= {"Running", "Done"}, moved_on


def test_both_replicas_samples_overlapped_at_the_handover_and_no_panel_doubled(rollout: Fleet) -> None:
    assert rollout.done_at_release < NODES, "the second leader change came in the middle of the rollout"
    raw = run_range(rollout, "count(upgrader_rollout_halted)", "released", "end")
    doubled = sorted(t for t, s in raw.items() if s[0][1] == 2)
    assert doubled, "the stopped leader's last sample lingered beside the new leader's (else this proves nothing)"
    print(f"\nboth replicas' rollout samples present for {len(doubled) * STEP:.2f} s after the release, "
          f"{rollout.done_at_release} of {NODES} nodes done then")
    for title in ("Nodes per stage", "Blocked nodes by reason", "Progress per failure domain"):
        steps = run_range(rollout, panel(rollout, title), "released", "end")
        assert all(len(steps[t]) == len(steps[doubled[0]]) for t in doubled), title
    nodes = run_range(rollout, panel(rollout, "Nodes per stage"), "released", "end")
    assert {sum(v for _, v in nodes[t]) for t in doubled} == {NODES}


def test_the_blocked_node_is_shown_while_blocked_and_never_after(rollout: Fleet) -> None:
    table = panel(rollout, "Blocked and failed nodes")
    pdb = {"node": rollout.info.blocked_node, "state": "pod-deletion-required", "reason": "pdb"}
    for mark in ("halted", "partitioned"):  # before and after the first leader change
        rows = [r["metric"] for r in rollout.prometheus.instant(table, rollout.marks[mark])]
        assert pdb in rows, (mark, rows)
        assert len({r["node"] for r in rows}) == len(rows), f"a node listed twice at {mark}: {rows}"
    after = run_range(rollout, table, "done")
    assert not after, f"a node shown blocked after Done: {after}"


def test_only_the_leader_exports_the_rollout(rollout: Fleet) -> None:
    a, b = rollout.replicas["a"], rollout.replicas["b"]
    at = rollout.marks["partitioned"]
    up = {r["metric"]["instance"]: float(r["value"][1]) for r in rollout.prometheus.instant("up", at)}
    assert up == {a.instance: 1.0, b.instance: 1.0}, "the cut-off replica is alive and scraped"
    exporting = {r["metric"]["instance"] for r in rollout.prometheus.instant("upgrader_rollout_halted", at)}
    assert exporting == {b.instance}, "the replica that lost the Lease stopped exporting its last view"
    leader = {r["metric"]["instance"]: float(r["value"][1]) for r in rollout.prometheus.instant("upgrader_leader", at)}
    assert leader == {a.instance: 0.0, b.instance: 1.0}
    end = {r["metric"]["instance"] for r in rollout.prometheus.instant("upgrader_rollout_halted", rollout.marks["end"])}
    assert end == {a.instance}


def test_counters_start_at_zero_and_count_the_first_labelling(rollout: Fleet) -> None:
    b = rollout.replicas["b"]
    series = rollout.prometheus.series_range(
        f'upgrader_state_transitions_total{{instance="{b.instance}"}}', rollout.marks["start"],
        rollout.marks["end"], 1.0,
    )
    assert len(series) >= len(transition_pairs()), "every transition series exists from start-up"
    first = {(s["metric"]["from_state"], s["metric"]["to_state"]): float(s["values"][0][1]) for s in series}
    assert set(first.values()) == {0.0}, f"series born above 0: {[k for k, v in first.items() if v]}"
    moved = rollout.prometheus.instant(
        f'increase(upgrader_state_transitions_total{{instance="{b.instance}"}}[10m])', rollout.marks["end"]
    )
    assert any(float(r["value"][1]) > 0 for r in moved), "increase() sees replica-b's transitions"
    labelled = rollout.prometheus.instant(
        f'sum(upgrader_state_transitions_total{{from_state="{UNLABELLED}"}})', rollout.marks["halted"]
    )
    assert float(labelled[0]["value"][1]) == NODES
    at = rollout.marks["partitioned"]  # replica-b scraped every 5 s: long up by then
    passes = rollout.prometheus.instant(f'upgrader_reconcile_total{{instance="{b.instance}"}}', at)
    results = {r["metric"]["result"] for r in passes}
    assert results == {"ok", "error", "not_leader", "stale_lease"}, "every pass result from start-up, zeros included"


ROLLOUT_ALERTS = ("UpgraderRolloutHalted", "UpgraderNodeStuckInState", "UpgraderNodeUpgradeFailed")


def test_no_alert_fires_after_done_and_the_halt_was_seen(rollout: Fleet) -> None:
    groups = yaml.safe_load(write_rules(rollout.prometheus.log.parent).read_text())["groups"]
    rules = {r["alert"]: r for r in groups[0]["rules"]}
    assert rollout.prometheus.instant(rules["UpgraderRolloutHalted"]["expr"], rollout.marks["halted"]), "halted held"
    for name in ROLLOUT_ALERTS:
        after = run_range(rollout, rules[name]["expr"], "done")
        assert not after, f"{name}: its expression was true after Done: {after}"
    firing = run_range(rollout, 'ALERTS{alertstate="firing"}', "done")
    assert not firing, f"alerts firing after Done: {firing}"
    active = {(a["labels"]["alertname"], a["state"]) for a in rollout.prometheus.api("alerts")["alerts"]}
    print(f"\nalerts active at the end: {sorted(active)}")
    # Replica-a's failed passes while cut off are real: they may make UpgraderReconcileErrors pending
    # (it fires only after 15 minutes of them), nothing else.
    assert active <= {("UpgraderReconcileErrors", "pending")}, active
