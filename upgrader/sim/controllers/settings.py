"""Knobs for the emulator's time-driven behaviour and its image registry."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

# Marks on the objects the emulator animates.
DRIVER_COMPONENT_LABEL = "app.kubernetes.io/component"
DRIVER_COMPONENT = "nvidia-driver"
VALIDATOR_APP = "nvidia-operator-validator"
JOB_RUN_SECONDS = "sim.upgrader.io/run-seconds"  # on a Job: how long its pods run; "never" = forever
GPU = "nvidia.com/gpu"


@dataclass
class SimSettings:
    """Delays are in (possibly virtual) seconds."""

    pod_recreate_delay: float = 1.0  # a deleted DaemonSet pod comes back after this
    pod_ready_delay: float = 2.0  # a new DaemonSet pod turns Ready after this
    image_pull_delay: float = 1.0  # a missing image is reported after this
    image_pull_backoff: float = 10.0  # the kubelet pulls a missing image again after this, doubling
    validator_ready_delay: float = 1.0  # validators follow a Ready driver after this
    job_replace_delay: float = 1.0  # a Job replaces a pod it lost after this
    workload_ready_delay: float = 2.0  # a rescheduled ReplicaSet/StatefulSet pod turns Ready after this
    # repository -> tags it holds; images from repositories not listed here always pull.
    registry: dict[str, set[str]] = field(default_factory=dict)
    # Nodes whose new driver loads but never validates (validators never turn Ready).
    broken_validation_nodes: set[str] = field(default_factory=set)
    # Randomised durations (off by default: every delay is exactly its base). With jitter j > 0 each
    # delay is its base times a factor drawn log-uniformly in [1 / (1 + j), 1 + j] (j = 1: 0.5x .. 2x),
    # the same factor for the same (kind, node) whenever it is asked for, whatever the order of events.
    jitter: float = 0.0
    seed: int = 0
    # Explicit per-node distributions instead: (kind, node, base) -> seconds; overrides `jitter`.
    durations: Callable[[str, str, float], float] | None = None
    # (kind, node) -> the seconds last drawn, while jitter or `durations` is on (for benchmarks' bounds).
    drawn: dict[tuple[str, str], float] = field(default_factory=dict)

    def delay(self, kind: str, node: str, base: float) -> float:
        """The delay of `kind` (pod_recreate, pod_ready, validator_ready, job_run, ...) on `node`:
        exactly `base` unless jitter or `durations` is set."""
        if self.durations is None and not self.jitter:
            return base
        if self.durations is not None:
            value = max(0.0, self.durations(kind, node, base))
        else:
            spread = math.log1p(self.jitter)
            value = base * math.exp(random.Random(f"{self.seed}/{kind}/{node}").uniform(-spread, spread))
        self.drawn[(kind, node)] = value
        return value

    def image_available(self, image: str) -> bool:
        repo, _, tag = image.rpartition(":")
        if not repo or "/" in tag:
            repo, tag = image, "latest"
        known = self.registry.get(repo)
        return known is None or tag in known
