"""Shared by the compatibility profile tests: the H100 combination, and `entry`/`dump`/`profile`, which
build one profile as the YAML file holds it."""

from __future__ import annotations

from datetime import date
from typing import Any

import yaml

from upgrader.core.compat.profiles import Profile, load_profiles_text

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
K105, K113 = "5.15.0-105-generic", "5.15.0-113-generic"
DRIVER, OS = "550.90.07", "ubuntu22.04"
P5 = "node.kubernetes.io/instance-type=p5.48xlarge"
TODAY = date(2026, 11, 29)
SOURCE = "profiles.yaml"


def entry(**changes: Any) -> dict[str, Any]:
    """One profile as it sits in the YAML file (camelCase keys); `changes` override or, with None, drop."""
    data: dict[str, Any] = {
        "name": "h100-550",
        "version": 2,
        "owner": "gpu-platform",
        "qualification": {"date": date(2026, 5, 4), "by": "jdoe", "record": "https://tickets.example/GPU-1"},
        "expires": date(2027, 5, 4),
        "gpuProduct": H100,
        "driver": DRIVER,
        "kernel": K113,
        "os": OS,
        "nodeSelector": P5,
    }
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def dump(*entries: dict[str, Any]) -> str:
    return yaml.safe_dump({"profiles": list(entries)}, sort_keys=False)


def profile(**changes: Any) -> Profile:
    return load_profiles_text(dump(entry(**changes)))[0]
