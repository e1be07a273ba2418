"""Knobs for the emulator's time-driven behaviour and its image registry."""

from __future__ import annotations

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
    validator_ready_delay: float = 1.0  # validators follow a Ready driver after this
    job_replace_delay: float = 1.0  # a Job replaces a pod it lost after this
    workload_ready_delay: float = 2.0  # a rescheduled ReplicaSet/StatefulSet pod turns Ready after this
    # repository -> tags it holds; images from repositories not listed here always pull.
    registry: dict[str, set[str]] = field(default_factory=dict)
    # Nodes whose new driver loads but never validates (validators never turn Ready).
    broken_validation_nodes: set[str] = field(default_factory=set)

    def image_available(self, image: str) -> bool:
        repo, _, tag = image.rpartition(":")
        if not repo or "/" in tag:
            repo, tag = image, "latest"
        known = self.registry.get(repo)
        return known is None or tag in known
