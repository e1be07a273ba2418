"""`upgrader sim serve`: run an emulated cluster until SIGINT/SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import IO

from upgrader.inputs import UsageError
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build


def _open_audit(path: str | None) -> IO[str] | None:
    if path is None:
        return None
    try:
        return open(path, "a", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write audit log {path}: {exc.strerror}") from None


def serve(
    scenario: str,
    nodes: int,
    port: int,
    kubeconfig: str,
    audit_log: str | None,
    seed: int,
    enforce_rbac: bool = False,
) -> int:
    target = Path(kubeconfig)
    if target.is_dir():
        raise UsageError(f"--kubeconfig {kubeconfig} is a directory")
    if not target.parent.exists():
        raise UsageError(f"--kubeconfig {kubeconfig}: directory {target.parent} does not exist")
    audit = _open_audit(audit_log)
    cluster = EmulatedCluster(seed=seed, audit=audit, enforce_rbac=enforce_rbac)
    cluster.dispatcher.https = enforce_rbac  # kubectl --token sends its token to https servers only
    try:
        info = build(cluster, scenario, nodes)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        url = cluster.serve(port=port)
    except OSError as exc:
        raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    assert cluster.server is not None
    cluster.server.write_kubeconfig(target)  # over TLS (RBAC enforced) with its certificate
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"emulated cluster '{scenario}' with {len(info.nodes)} GPU nodes listening on {url}", flush=True)
    print(
        f"kubeconfig written to {target}; try: kubectl --kubeconfig {target} get nodes "
        f"-L nvidia.com/gpu-driver-upgrade-state",
        flush=True,
    )
    if enforce_rbac:
        print(
            "RBAC enforced: the kubeconfig's token is cluster-admin; others come from "
            "`kubectl create token <serviceaccount> -n <namespace>`",
            flush=True,
        )
    for note in info.notes:
        print(f"note: {note}", flush=True)
    while not stop.wait(0.5):
        pass
    cluster.stop()
    if audit is not None:
        audit.close()
    print("emulator stopped", file=sys.stderr, flush=True)
    return 0
