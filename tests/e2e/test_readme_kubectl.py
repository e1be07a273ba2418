"""The README's kubectl section, followed literally with the real kubectl, then the controller with the
policy it names: the drains leave gpu-a-01 and gpu-c-01 cordoned, and once the PodDisruptionBudget is
relaxed (runbooks/pdb-blocked-eviction.md) the rollout waits on maxUnavailable. The status, the status
ConfigMap, one Event and one log line name both nodes and what to undo; undoing it ends the rollout Done.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.shown import shown
from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.runner import start_watches
from upgrader.controller.settings import load_policy
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.sim.apiserver.faults import RequestRecord

from .conftest import Rollout

pytestmark = pytest.mark.kubectl

ROOT = Path(__file__).resolve().parent.parent.parent
WAIT = (
    "maxUnavailable 2 reached: gpu-a-01 (cordoned, not by upgrader), gpu-c-01 (cordoned, not by upgrader); "
    "uncordon them or raise maxUnavailable; see runbooks/rollout-halted.md"
)
HELD_PASSES = 30  # passes the wait is held for: each would have said it again, were it said every pass


@dataclass
class Step:
    argv: list[str]  # a kubectl command line, as the README writes it
    fails_with: str | None  # the README's `#   -> <output>` under it: the command fails saying this


def readme_section() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Poking the emulated cluster with kubectl", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block, "the README's kubectl section has no sh block"
    return block.group(1).splitlines()


def kubectl_steps(lines: list[str]) -> list[Step]:
    steps: list[Step] = []
    for line in lines:
        expected = re.match(r"#\s+->\s+(.*)$", line)
        if expected:
            steps[-1].fails_with = expected.group(1).strip()
        elif line.startswith("kubectl "):
            steps.append(Step(shlex.split(line, comments=True), None))
    return steps


def flag(line: str, name: str) -> str:
    words = shlex.split(line, comments=True)
    return words[words.index(name) + 1]


def run_kubectl(argv: list[str], kubeconfig: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """As the README runs it: after `export KUBECONFIG=...` (its own HOME keeps its discovery cache apart)."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl not installed (not on PATH)")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(home)}
    return subprocess.run([binary, *argv[1:]], capture_output=True, text=True, timeout=60, env=env)


def run_until(
    r: Rollout, ctl: Controller, done: Callable[[dict[str, Any]], bool], passes: int = 1, timeout: float = 90.0
) -> list[PassReport]:
    """Run the controller until `done(status)` held for `passes` passes in a row: those passes' reports."""
    stop, wake = threading.Event(), threading.Event()
    start_watches(ctl, stop, wake)
    seen = len(r.reports)
    thread = threading.Thread(target=ctl.run, args=(stop, wake), daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            time.sleep(0.05)
            reports = [p for p in r.reports[seen:] if p.status is not None]
            held = 0
            for report in reversed(reports):
                if not done(shown(report.status)):
                    break
                held += 1
            if held >= passes:
                return reports[-held:]
        last = shown(r.reports[-1].status).get("message") if r.reports else None
        raise AssertionError(f"not reached in {timeout}s; last status message: {last}")
    finally:
        stop.set()
        wake.set()
        thread.join(timeout=10)


def said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [rec.getMessage() for rec in caplog.records if text in rec.getMessage()]


def test_the_readme_kubectl_section_then_a_rollout_that_says_what_it_waits_on(
    rollout: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lines = readme_section()
    serve = next(line for line in lines if " sim serve " in line)
    run = next(line for line in lines if " run " in line and "upgrader" in line)
    assert "export KUBECONFIG=./sim.kubeconfig" in lines
    base: Rollout = rollout(flag(serve, "--scenario"))
    r = replace(base, policy=load_policy(str(ROOT / flag(run, "--policy"))))
    caplog.set_level(logging.INFO, logger="upgrader")

    # 1. The README's kubectl commands, one by one, each as the README says it ends.
    for step in kubectl_steps(lines):
        done = run_kubectl(step.argv, r.kubeconfig, tmp_path)
        command = shlex.join(step.argv)
        if step.fails_with is None:
            assert done.returncode == 0, f"{command}: {done.stderr}"
        else:
            assert done.returncode != 0 and step.fails_with in done.stderr, f"{command}: {done.stderr}"
        if step.argv[:3] == ["kubectl", "get", "pdb"]:  # "critical-finetune allows 0 disruptions"
            row = next(line.split() for line in done.stdout.splitlines() if " critical-finetune " in line)
            assert row[4] == "0", done.stdout
    assert [n for n in r.info.nodes if r.node(n)["spec"].get("unschedulable")] == ["gpu-a-01", "gpu-c-01"]

    # 2. `upgrader run` with that policy: halted at gpu-a-01 on the budget the drain already met.
    halted = shown(run_until(r, r.controller(), lambda s: s["phase"] == "Halted")[-1].status)
    assert "PodDisruptionBudget ml-training/critical-finetune" in halted["message"]
    assert halted["waiting_on"] is None

    # 3. runbooks/pdb-blocked-eviction.md: relax the budget. gpu-a-01 upgrades and keeps its drain's
    # cordon; both cordons now hold maxUnavailable (25% of 6 = 2), for as long as nobody acts.
    relax = ["kubectl", "patch", "pdb", "critical-finetune", "-n", "ml-training", "--type", "merge",
             "-p", '{"spec":{"minAvailable":0}}']
    assert run_kubectl(relax, r.kubeconfig, tmp_path).returncode == 0
    held = run_until(r, r.controller(), lambda s: s["message"].startswith("maxUnavailable"), passes=HELD_PASSES)
    status = shown(held[-1].status)
    assert status["message"] == WAIT
    assert status["waiting_on"] == {
        "reason": "max-unavailable",
        "domain": "us-east-1a",
        "nodes": [
            {"node": "gpu-a-01", "why": "cordoned, not by upgrader"},
            {"node": "gpu-c-01", "why": "cordoned, not by upgrader"},
        ],
        "count": 2,
        "next": "gpu-a-02",
        "until": None,
        "runbook": "runbooks/rollout-halted.md",
    }
    assert r.node("gpu-a-01")["metadata"]["labels"][STATE_LABEL] == State.DONE.value

    # The status ConfigMap, read with kubectl alone.
    get_cm = ["kubectl", "get", "configmap", "gpu-driver-upgrade-status", "-n", "gpu-operator", "-o", "json"]
    data = json.loads(run_kubectl(get_cm, r.kubeconfig, tmp_path).stdout)["data"]
    assert data["message"] == WAIT
    assert json.loads(data["status.json"])["waiting_on"] == status["waiting_on"]

    # One Warning Event, on the first node named.
    get_events = ["kubectl", "get", "events", "-A", "--field-selector", "reason=GPUDriverUpgrade", "-o", "json"]
    events = json.loads(run_kubectl(get_events, r.kubeconfig, tmp_path).stdout)["items"]
    waiting = [e for e in events if e["message"] == f"rollout waiting: {WAIT}"]
    assert [(e["type"], e["involvedObject"]["name"], e["count"]) for e in waiting] == [("Warning", "gpu-a-01", 1)]

    # One log line, though every pass of the HELD_PASSES decided the same.
    assert len(said(caplog, WAIT)) == 1
    assert all(p.status.message == WAIT for p in held)

    # A restarted controller says it once in its own log, and sends no second Event.
    run_until(r, r.controller(), lambda s: s["message"] == WAIT, passes=HELD_PASSES)
    assert said(caplog, WAIT) == [f"gpu-a-01: rollout waiting: {WAIT}", f"rollout waiting: {WAIT}"]
    events = json.loads(run_kubectl(get_events, r.kubeconfig, tmp_path).stdout)["items"]
    assert [e["count"] for e in events if e["message"] == f"rollout waiting: {WAIT}"] == [1]

    # 4. Do what it says: uncordon them. The rollout goes on to Done.
    before = len(r.cluster.requests)
    for name in ("gpu-a-01", "gpu-c-01"):
        assert run_kubectl(["kubectl", "uncordon", name], r.kubeconfig, tmp_path).returncode == 0
    final = shown(run_until(r, r.controller(), lambda s: s["phase"] == "Done", timeout=120)[-1].status)
    assert final["message"] == "done: 6 of 6 nodes upgraded" and final["waiting_on"] is None
    for name in r.info.nodes:
        node = r.node(name)
        assert node["metadata"]["labels"][STATE_LABEL] == State.DONE.value, name
        assert not node["spec"].get("unschedulable"), f"{name} left cordoned"
    # Those two cordons were lifted by the person with kubectl, never by upgrader.
    lifted = [q for q in r.cluster.requests[:before] if q.name in ("gpu-a-01", "gpu-c-01") and lifts_cordon(q)]
    assert lifted == [], lifted
    uncordons = [(q.name, q.user_agent.split("/")[0]) for q in r.cluster.requests[before:] if lifts_cordon(q)]
    assert uncordons[:2] == [("gpu-a-01", "kubectl"), ("gpu-c-01", "kubectl")]


def lifts_cordon(request: RequestRecord) -> bool:
    """A write to a node that sets `spec.unschedulable` false or removes it."""
    body: Any = request.body
    spec: Any = body.get("spec") if request.resource == "nodes" and isinstance(body, dict) else None
    return isinstance(spec, dict) and "unschedulable" in spec and not spec["unschedulable"]
