"""Write a kubeconfig that points kubectl and the official client at the emulator."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

CONTEXT = "upgrader-sim"


def kubeconfig_text(server_url: str, context: str = CONTEXT) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server_url}}],
        "users": [{"name": context, "user": {"token": "emulator"}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def write_kubeconfig(path: str | os.PathLike[str], server_url: str, context: str = CONTEXT) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(kubeconfig_text(server_url, context))
    target.chmod(0o600)
    return target
