"""Processes for the benchmarks: an emulator serving a generated fleet, a controller doing passes,
and `measure` for the wall time and peak RSS of one fresh process.

The emulator (`fleet_server.py`) and the controller (`pass_runner.py`) each run in their own
process, so the controller's CPU time and memory are its own. Both end when their stdin closes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"


# Runs argv[1:] as a child, its output discarded: wall seconds, the child's peak RSS (KiB), exit code.
WRAP = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); wall = time.perf_counter() - t; "
        "print(wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)")


def measure(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one fresh process running `argv`."""
    out = subprocess.run([sys.executable, "-c", WRAP, *argv], capture_output=True, text=True, check=True, cwd=ROOT)
    wall, rss, code = out.stdout.split()
    if code != "0":
        raise SystemExit(f"{argv[0]} failed ({code}): {out.stderr[-2000:]}")
    return float(wall), int(rss) / 1024


def _ready_line(proc: subprocess.Popen[str], what: str) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"{what} exited before it was ready (code {proc.wait()})")
    data: dict[str, Any] = json.loads(line)
    return data


@dataclass
class Fleet:
    """An emulator process serving `nodes` generated GPU nodes (see fleet_server.py)."""

    nodes: int
    proc: subprocess.Popen[str]
    url: str
    kubeconfig: Path
    info: dict[str, Any]

    @classmethod
    def start(
        cls, nodes: int, pods_per_node: int, workdir: Path, audit_log: Path | None = None, tag: str = ""
    ) -> Fleet:
        kubeconfig = workdir / f"fleet-{nodes}{tag}.kubeconfig"
        cmd = [sys.executable, str(HERE / "fleet_server.py"), "--nodes", str(nodes),
               "--pods-per-node", str(pods_per_node), "--kubeconfig", str(kubeconfig)]
        if audit_log is not None:
            cmd += ["--audit-log", str(audit_log)]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        info = _ready_line(proc, f"emulator ({nodes} nodes)")
        return cls(nodes, proc, info["url"], kubeconfig, info)

    def label(self, names: list[str], state: str) -> int:
        """Set nodes' upgrade state with a merge patch, as an operator's `kubectl label` would; the
        resourceVersion of the last node written."""
        version = 0
        for name in names:
            body = json.dumps({"metadata": {"labels": {STATE_LABEL: state}}}).encode()
            request = urllib.request.Request(
                f"{self.url}/api/v1/nodes/{name}", body, method="PATCH",
                headers={"Content-Type": "application/merge-patch+json"},
            )
            with urllib.request.urlopen(request) as answer:
                version = int(json.loads(answer.read())["metadata"]["resourceVersion"])
        return version

    def resume(self) -> None:
        """Resume the rollout with the real `upgrader resume` (fleet_server.py's fleets carry an older
        CLI's pause in their status ConfigMap, and the last status recorded it: only a `paused: "false"`
        in the control ConfigMap ends it, as the CLI writes)."""
        cli = Path(sys.executable).parent / "upgrader"
        out = subprocess.run([str(cli), "resume", "--kubeconfig", str(self.kubeconfig)], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"upgrader resume failed ({out.returncode}): {out.stdout}{out.stderr}")

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Controller:
    """A controller process (pass_runner.py) against a fleet; one reconcile pass per `run_pass`."""

    def __init__(self, kubeconfig: Path, watch: bool = False, policy: str | None = None) -> None:
        self.watch = watch
        cmd = [sys.executable, str(HERE / "pass_runner.py"), "--kubeconfig", str(kubeconfig)]
        if watch:
            cmd.append("--watch")
        if policy:
            cmd += ["--policy", policy]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.info = _ready_line(self.proc, "controller")

    def run_pass(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("pass\n")
        self.proc.stdin.flush()
        result = _ready_line(self.proc, "controller")
        if result.get("error"):
            raise SystemExit(f"controller pass failed: {result['error']}")
        return result

    def sync(self, version: int) -> None:
        """Wait until the controller's node cache has caught up with `version` (--watch only)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"sync {version}\n")
        self.proc.stdin.flush()
        if not _ready_line(self.proc, "controller").get("synced"):
            raise SystemExit(f"controller cache did not reach resourceVersion {version}")

    def stop(self) -> dict[str, Any]:
        """End the process; its last line (the watches' request count) or {} if it had ended."""
        assert self.proc.stdin is not None
        if self.proc.stdin.closed:
            return {}
        self.proc.stdin.close()
        assert self.proc.stdout is not None
        last = self.proc.stdout.readline()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return json.loads(last) if last.strip() else {}


def total(requests: dict[str, int]) -> int:
    return sum(requests.values())


def reads(requests: dict[str, int]) -> int:
    return requests.get("get", 0) + requests.get("list", 0)
