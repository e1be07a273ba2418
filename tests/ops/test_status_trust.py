"""`upgrader status` says whether a controller still acts on what it shows (the Lease), and when the
status was written; `pause`/`resume` never write a status nobody made; without `-n` the CLI finds the
controller's namespace (issue 13, item 4)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from tests.conftest import required_binary
from upgrader.commands.cli import main
from upgrader.controller.loop import Controller
from upgrader.controller.runner import build_controller
from upgrader.controller.settings import Settings
from upgrader.core.model.timefmt import rfc3339, rfc3339_micro
from upgrader.core.policy.policy import Policy
from upgrader.kube.server_clock import server_clock_of
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

CM = "gpu-driver-upgrade-status"
CONTROL = "gpu-driver-upgrade-control"  # the operators' intent: pause, acknowledged failures
LEASE = ("leases", "coordination.k8s.io", "v1")
MERGE = "application/merge-patch+json"
STALE = re.compile(
    r"no controller is running: Lease gpu-operator/gpu-driver-upgrader last renewed by ctl-trust at "
    r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ), expired (\d+)s ago; this status may be stale"
)


class Served:
    def __init__(self, tmp: Path, scenario: str = "pdb-blocked") -> None:
        self.cluster = EmulatedCluster()
        build(self.cluster, scenario)
        self.url = self.cluster.serve()
        self.kubeconfig = str(self.cluster.write_kubeconfig(tmp / "kubeconfig"))

    def controller(
        self, namespace: str = "gpu-operator", leader_election: bool = True, skew: float = 0.0
    ) -> Controller:
        """A controller that runs a few passes; `skew`: how far its machine's clock is off."""
        if self.cluster.get("namespaces", namespace) is None:
            self.cluster.create("namespaces", {"metadata": {"name": namespace}})
        settings = Settings(identity="ctl-trust", namespace=namespace, lease_duration_seconds=15)
        client = k8s.ApiClient(k8s.Configuration(host=self.url))
        server_clock_of(client).local = lambda: time.time() + skew
        ctl = build_controller(client, Policy(), settings, leader_election)
        for _ in range(20):  # the scenario's PDB halts the canary within a few passes
            if getattr(ctl.reconcile().status, "phase", None) == "Halted":
                break
        return ctl

    def renewed_ago(self, seconds: float, namespace: str = "gpu-operator") -> float:
        """Move the Lease's renewTime into the past, as if the controller had stopped then."""
        when = time.time() - seconds
        spec = {"renewTime": rfc3339_micro(when)}
        self.cluster.store.patch(self.cluster.type(*LEASE), namespace, "gpu-driver-upgrader", MERGE, {"spec": spec})
        return when

    def writes(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.cluster.requests if r.method != "GET"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path)
    yield s
    s.cluster.stop()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----- a running controller, a stopped one, none ---------------------------------------------------


def test_status_names_the_lease_holder_and_when_it_expires(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    served.controller()
    code, out, err = cli(capsys, "status", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("PHASE: Halted   halted: gpu-a-01 blocked")
    assert re.fullmatch(r"UPDATED: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\d+s ago\)   NODES: 6", lines[1]), lines[1]
    assert re.fullmatch(
        r"CONTROLLER: ctl-trust \(Lease gpu-operator/gpu-driver-upgrader renewed (\S+) \(\d+s ago\), expires (\S+)\)",
        lines[2],
    ), lines[2]


@pytest.mark.parametrize(("laptop", "controller"), [("+15m", -600.0), ("-15m", 600.0)])
def test_status_from_a_laptop_minutes_off_sees_a_controller_minutes_off_the_other_way_as_fresh(
    served: Served, laptop: str, controller: float
) -> None:
    """The real CLI under libfaketime: both clocks off by minutes, both read the API server's."""
    faketime = required_binary("faketime", "apt-get install faketime", "UPGRADER_REQUIRE_FAKETIME")
    served.controller(skew=controller)
    argv = [faketime, "-f", laptop, sys.executable, "-m", "upgrader.commands.cli", "status",
            "--kubeconfig", served.kubeconfig, "-n", "gpu-operator"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done
    lines = done.stdout.splitlines()
    found = re.fullmatch(r"UPDATED: \S+ \((\d+)s ago\)   NODES: 6", lines[1])
    assert found and int(found.group(1)) <= 5, lines[1]
    found = re.fullmatch(r"CONTROLLER: ctl-trust \(Lease gpu-operator/gpu-driver-upgrader renewed \S+ \((\d+)s ago\), "
                         r"expires \S+\)", lines[2])
    assert found and int(found.group(1)) <= 5, lines[2]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_machine_output_carries_the_controller(
    served: Served, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    served.controller()
    code, out, err = cli(capsys, "status", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator", "-o", output)
    assert (code, err) == (0, "")
    shown = json.loads(out) if output == "json" else yaml.safe_load(out)
    controller = shown["controller"]
    assert (controller["holder"], controller["alive"]) == ("ctl-trust", True)
    assert controller["lease"] == "gpu-operator/gpu-driver-upgrader"
    renewed = time.mktime(time.strptime(controller["renewed"], "%Y-%m-%dT%H:%M:%SZ"))
    expires = time.mktime(time.strptime(controller["expires"], "%Y-%m-%dT%H:%M:%SZ"))
    assert expires - renewed == 15
    assert shown["phase"] == "Halted" and shown["updated_at"]


def test_status_after_the_controller_stopped_says_so_first_and_exits_1(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    served.controller()
    stopped = served.renewed_ago(100)
    code, out, err = cli(capsys, "status", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator")
    assert (code, err) == (1, "")
    first, second = out.splitlines()[:2]
    found = STALE.fullmatch(first)
    assert found, first
    assert found.group(1) == rfc3339(stopped)
    assert 84 <= int(found.group(2)) <= 87  # 100 s ago, for 15 s
    assert second.startswith("PHASE: Halted")
    assert "CONTROLLER: none (Lease gpu-operator/gpu-driver-upgrader)" in out


def test_a_lease_renewed_in_the_api_servers_future_is_clock_skew_and_exit_1(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead replica whose clock ran 15 minutes ahead: never "renewed 0s ago", never exit 0."""
    served.controller()
    served.renewed_ago(-900)
    code, out, err = cli(capsys, "status", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator")
    assert (code, err) == (1, "")
    first = out.splitlines()[0]
    assert re.fullmatch(
        r"cannot tell whether a controller is running: Lease gpu-operator/gpu-driver-upgrader was renewed by "
        r"ctl-trust at \S+, 1[45]m\d\ds ahead of the API server's clock \(stamped by a replica whose clock runs "
        r"ahead: clock skew\); this status may be stale",
        first,
    ), first
    assert "CONTROLLER: unknown (Lease gpu-operator/gpu-driver-upgrader renewTime " in out


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_machine_output_after_the_controller_stopped(
    served: Served, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    served.controller()
    stopped = served.renewed_ago(100)
    code, out, err = cli(capsys, "status", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator", "-o", output)
    assert code == 1
    assert err.count("\n") == 1 and STALE.fullmatch(err.removeprefix("upgrader: ").rstrip("\n")), err
    shown = json.loads(out) if output == "json" else yaml.safe_load(out)
    assert shown["controller"] == {
        "lease": "gpu-operator/gpu-driver-upgrader",
        "holder": "ctl-trust",
        "renewed": rfc3339(stopped),
        "expires": rfc3339(stopped + 15),
        "alive": False,
    }


def test_a_released_lease_means_no_controller(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    ctl = served.controller()
    assert ctl.elector is not None
    ctl.elector.release()  # what a clean shutdown does
    code, out, _ = cli(capsys, "status", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator")
    assert code == 1
    assert out.splitlines()[0] == (
        "no controller is running: Lease gpu-operator/gpu-driver-upgrader has no holder (released); "
        "this status may be stale"
    )


def test_no_lease_means_no_controller(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    served.controller(leader_election=False)
    code, out, _ = cli(capsys, "status", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator")
    assert code == 1
    assert out.splitlines()[0] == (
        "no controller is running: no Lease gpu-operator/gpu-driver-upgrader (none has run here, or it runs "
        "with --no-leader-election); this status may be stale"
    )


# ----- pause and resume need a status to change ----------------------------------------------------


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_pause_and_resume_refuse_where_nothing_ran(
    served: Served, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    code, out, err = cli(capsys, verb, "--kubeconfig", served.kubeconfig)
    assert (code, out) == (1, "")
    assert err == (
        f"upgrader: cannot {verb}: no rollout status in configmap gpu-operator/{CM}, nor in namespace "
        "upgrader-system (has the controller run yet? -n names its namespace)\n"
    )
    assert served.writes() == []
    assert served.cluster.get("configmaps", CM, "gpu-operator") is None


def test_resume_leaves_a_blank_status_alone_and_status_does_not_show_phase_none(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `resume` wrote on a cluster where nothing ran, before: a ConfigMap with no status."""
    served.cluster.create("configmaps", {"metadata": {"name": CM}, "data": {"paused": "false"}}, "gpu-operator")
    before = served.cluster.get("configmaps", CM, "gpu-operator")
    code, out, err = cli(capsys, "resume", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator")
    assert (code, out) == (1, "")
    assert err == (
        f"upgrader: cannot resume: no rollout status in configmap gpu-operator/{CM} (has the controller run yet?)\n"
    )
    assert served.cluster.get("configmaps", CM, "gpu-operator") == before
    code, out, err = cli(capsys, "status", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator")
    assert (code, out) == (1, "")
    assert "PHASE: None" not in err and err.count("\n") == 1


def test_pause_and_resume_change_a_running_controllers_status(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    ctl = served.controller()
    assert cli(capsys, "pause", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator") == (
        0, f"paused: no new node starts (configmap gpu-operator/{CONTROL})\n", "")
    assert ctl.reconcile().status.phase == "Paused"
    code, out, _ = cli(capsys, "resume", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator")
    assert (code, out) == (0, "resumed: new nodes may start; failures are not acknowledged by resume\n")
    assert ctl.reconcile().status.phase == "Halted"


# ----- which namespace ----------------------------------------------------------------------------


def test_without_n_the_deployed_namespace_is_found_and_named(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    served.controller(namespace="upgrader-system")
    code, out, err = cli(capsys, "status", "--kubeconfig", served.kubeconfig)
    assert code == 0
    assert err == "upgrader: namespace upgrader-system (the controller's status or Lease is there; -n chooses)\n"
    assert "Lease upgrader-system/gpu-driver-upgrader" in out
    code, out, _ = cli(capsys, "pause", "--kubeconfig", served.kubeconfig)
    assert (code, out) == (0, f"paused: no new node starts (configmap upgrader-system/{CONTROL})\n")
    assert (served.cluster.get("configmaps", CONTROL, "upgrader-system") or {})["data"]["paused"] == "true"
    assert served.cluster.get("configmaps", CM, "gpu-operator") is None


def test_a_controller_in_both_namespaces_is_refused_without_n(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    served.controller(namespace="upgrader-system")
    served.controller(namespace="gpu-operator")
    writes = served.writes()
    for verb in ("status", "pause", "resume"):
        code, out, err = cli(capsys, verb, "--kubeconfig", served.kubeconfig)
        assert (code, out) == (2, "")
        assert err == (
            "upgrader: error: a controller's status or Lease is in each of namespaces upgrader-system and "
            "gpu-operator: say which with -n (or UPGRADER_NAMESPACE)\n"
        )
    assert served.writes() == writes
    assert cli(capsys, "pause", "--kubeconfig", served.kubeconfig, "-n", "gpu-operator")[0] == 0


def test_upgrader_namespace_is_used_as_given(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served.controller(namespace="upgrader-system")
    served.controller(namespace="gpu-operator")
    monkeypatch.setenv("UPGRADER_NAMESPACE", "upgrader-system")
    code, out, err = cli(capsys, "status", "--kubeconfig", served.kubeconfig, "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["controller"]["lease"] == "upgrader-system/gpu-driver-upgrader"


# ----- an API server that does not answer ---------------------------------------------------------


@pytest.mark.parametrize(("verb", "words"), [("status", "read status"), ("pause", "pause"), ("resume", "resume")])
def test_an_unreachable_api_server_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str, words: str
) -> None:
    gone = Served(tmp_path)
    gone.cluster.stop()
    code, out, err = cli(capsys, verb, "--kubeconfig", gone.kubeconfig, "-n", "gpu-operator")
    assert (code, out) == (1, "")
    # The cause's words are the API client's (connection refused, or a timeout): one line of them.
    server = r"http://127\.0\.0\.1:\d+"
    assert re.fullmatch(rf"upgrader: cannot {words}: cannot reach the API server {server}: .+\n", err), err
