"""The command line's small promises (issue 13, item 5): every flag explained, `--version`, yaml beside
json, `status --watch` on one 80x24 screen with the phase and why first, Ctrl-C in `demo` said."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ctrl_c_reaches
from upgrader import __version__
from upgrader.commands.cli import build_parser, main
from upgrader.commands.liveness import ControllerSeen
from upgrader.commands.statusview import render_watch
from upgrader.core.fleet.managed import Fleet, fleet
from upgrader.core.model.states import (
    BLOCKED_KIND,
    BLOCKED_REASON,
    BLOCKED_SINCE,
    FAILED_AT,
    FAILED_KIND,
    FAILED_REASON,
    FAILED_STATE,
    State,
)
from upgrader.core.policy.policy import Policy
from upgrader.core.report.document import to_dict
from upgrader.core.report.entries import NodeWaiting
from upgrader.core.rollout.phase import Scope
from upgrader.core.rollout.schedule import Nodes, Standing, plan_starts
from upgrader.core.rollout.starts import acknowledged_failures
from upgrader.core.rollout.status import Decided, rollout_status

from .core.factories import NEW, T0, at, driver_pod, node, snapshot


def _parsers(parser: argparse.ArgumentParser, path: str = "upgrader") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


PARSERS = list(_parsers(build_parser()))
OPTIONS = [
    (path, action)
    for path, parser in PARSERS
    for action in parser._actions
    if action.option_strings and not isinstance(action, argparse._SubParsersAction)
]


def test_every_subcommand_is_walked() -> None:
    names = {path for path, _ in PARSERS}
    assert names >= {
        "upgrader", "upgrader sim serve", "upgrader run", "upgrader demo", "upgrader plan", "upgrader status",
        "upgrader pause", "upgrader resume", "upgrader compat",
    }


@pytest.mark.parametrize(("path", "action"), OPTIONS, ids=lambda v: v if isinstance(v, str) else v.dest)
def test_every_option_of_every_subcommand_has_help(path: str, action: argparse.Action) -> None:
    assert action.help and action.help != argparse.SUPPRESS and action.help.strip(), (path, action.option_strings)


def test_help_renders_for_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    for path, _ in PARSERS:
        with pytest.raises(SystemExit) as exit_:
            main([*path.split()[1:], "--help"])
        assert exit_.value.code == 0, path
        assert "usage: " in capsys.readouterr().out


def test_kubeconfig_help_says_what_the_client_does() -> None:
    """upgrader/kube/client.py: the file given; else in-cluster config in a pod; else the client's
    default kubeconfig ($KUBECONFIG, or ~/.kube/config). With --context only, never in-cluster."""
    for path, parser in PARSERS:
        actions = {a.dest: a for a in parser._actions}
        if "kubeconfig" not in actions or path == "upgrader sim serve":
            continue
        text = actions["kubeconfig"].help or ""
        assert "service account" in text and "$KUBECONFIG" in text and "~/.kube/config" in text, (path, text)
        assert "never the pod's service account" in (actions["context"].help or ""), path


def test_yaml_wherever_json() -> None:
    outputs = [(path, a) for path, a in OPTIONS if "--output" in a.option_strings]
    assert {path for path, _ in outputs} >= {"upgrader plan", "upgrader status"}
    for path, action in outputs:
        assert action.choices is not None and {"json", "yaml"} <= set(action.choices), path


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"upgrader {__version__}\n"


# ----- status --watch: one screen -----------------------------------------------------------------

PDB = "eviction of ml-training/finetune-{i}-0 refused by PodDisruptionBudget ml-training/finetune-{i} " \
      "(disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1)"
IMAGE = 'not done within the 600s timeout: driver pod gpu-operator/nvidia-driver-{i} not Ready: ImagePullBackOff: ' \
        'Back-off pulling image "nvcr.io/nvidia/driver:550-5.15.0-119-generic-ubuntu22.04"'


def big_halted_fleet() -> dict[str, Any]:
    """600 nodes in 12 zones: 30 blocked by PDBs, 20 failed on a missing image, the rest behind or done."""
    nodes = []
    for i in range(600):
        zone = f"us-east-{i % 12:02d}-zone-with-a-long-name"
        name = f"gpu-node-{i:04d}.compute.internal"
        if i < 30:
            marks = {BLOCKED_KIND: "pdb", BLOCKED_REASON: PDB.format(i=i), BLOCKED_SINCE: at(i)}
            nodes.append(node(name, State.POD_DELETION_REQUIRED, zone=zone, annotations=marks))
        elif i < 50:
            marks = {FAILED_KIND: "image", FAILED_STATE: State.POD_RESTART_REQUIRED.value,
                     FAILED_REASON: IMAGE.format(i=i), FAILED_AT: at(i)}
            nodes.append(node(name, State.FAILED, zone=zone, annotations=marks))
        else:
            nodes.append(node(name, State.DONE if i % 3 else State.UPGRADE_REQUIRED, zone=zone))
    snap = snapshot(nodes, [driver_pod(n.name, revision=NEW) for n in nodes])
    split = fleet(snap)
    acknowledged = acknowledged_failures(snap)
    now = T0 + 3600
    schedule = plan_starts(Nodes(split.managed), Policy(), now, False, Standing(acknowledged))
    managed = [n.name for n in split.managed]
    waiting = [NodeWaiting(n, "upgrade-required", "waiting for a maxParallelUpgrades slot", "")
               for n in managed[50:90]]
    members = Fleet(split.managed, [], [])
    # As the status ConfigMap holds it: what `upgrader status` reads and draws.
    return to_dict(rollout_status(snap, Policy(), Scope(members), now, acknowledged, Decided(schedule, waiting)))


@pytest.mark.parametrize(
    "controller",
    [
        ControllerSeen("upgrader-system/gpu-driver-upgrader", "upgrader-5d9c7b6f4-x8k2p", T0 + 3590, T0 + 3605, True),
        ControllerSeen("upgrader-system/gpu-driver-upgrader", "upgrader-5d9c7b6f4-x8k2p", T0 + 60, T0 + 75, False),
    ],
    ids=["alive", "stopped"],
)
def test_the_watch_frame_of_a_big_halted_fleet_fits_80x24(controller: ControllerSeen) -> None:
    status = big_halted_fleet()
    assert status["phase"] == "Halted" and len(status["blocked"]) == 30 and len(status["domains"]) == 12
    lines = render_watch(status, controller, T0 + 3600, 80, 24).split("\n")
    assert len(lines) <= 24, len(lines)
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    top = lines[2:7] if not controller.alive else lines[:5]
    if not controller.alive:  # said first: what follows may be stale
        assert lines[0].startswith("no controller is running: Lease upgrader-system/gpu-driver-upgrader")
    assert top[0].startswith("PHASE: Halted   nodes 600   updated ")
    reason = " ".join(top[1:])
    assert reason.startswith("halted: gpu-node-0000.compute.internal blocked in pod-deletion-required since")
    assert "refused by PodDisruptionBudget ml-training/finetune-0 (disruptionsAllowed=0" in reason
    text = "\n".join(lines)
    for section in ("BLOCKED (30)", "FAILED (20)", "DOMAINS (12)"):
        assert section in text
    assert "... and " in text  # what did not fit is counted, not dropped in silence


def test_a_small_fleet_shows_whole_in_the_watch_frame() -> None:
    status = big_halted_fleet()
    status["blocked"], status["failed"], status["waiting"] = status["blocked"][:2], status["failed"][:1], []
    status["domains"] = status["domains"][:3]
    lines = render_watch(status, None, T0 + 3600, 80, 24).split("\n")
    assert "... and " not in "\n".join(lines)
    assert sum(1 for line in lines if line.startswith(("  ", "> "))) == 2 + 1 + 3


# ----- Ctrl-C in demo -----------------------------------------------------------------------------


def test_ctrl_c_in_demo_stops_cleanly_and_says_so() -> None:
    argv = [sys.executable, "-m", "upgrader.commands.cli", "demo"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
                            preexec_fn=ctrl_c_reaches)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the emulated cluster is up
    assert first.startswith("emulated cluster 'healthy'"), first
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the controller is working: a progress line
        if proc.stdout.readline().startswith("["):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err == "upgrader: interrupted; the controller stopped and the emulated cluster is gone\n", err
    assert "Traceback" not in out + err
    assert "demo result" not in out
