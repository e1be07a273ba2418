"""What a GPU pod is, decided as the GPU Operator decides it (gpu-operator's `gpuPodSpecFilter`).

A pod holds a GPU, and must be gone before the driver module unloads, when it is Running or Pending
and either asks for a GPU resource (any resource named `nvidia.com/gpu*` or `nvidia.com/mig-*`, in
requests or limits) or holds a DRA ResourceClaim that NVIDIA's DRA driver (`gpu.nvidia.com`)
allocated, admin-access results aside. Where the Operator differs, we count more, never less:
init containers count too (a sidecar init container holds its GPU for the pod's whole life), and a
claim we cannot read counts as a GPU claim, as in the Operator: a pod evicted needlessly comes back,
a driver unloaded under a running job does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar


class PodView(Protocol):
    """What these checks read of a pod: views.PodView has it (named here, so views imports us only)."""

    @property
    def phase(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def claims(self) -> tuple[str, ...]: ...
    @property
    def terminal(self) -> bool: ...


Pod = TypeVar("Pod", bound=PodView)

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
ACTIVE_PHASES = frozenset({"Running", "Pending"})

# claim key ("namespace/name") -> allocated to an NVIDIA GPU; None: the claims could not be read.
GpuClaims = Mapping[str, bool] | None


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_RESOURCE_PREFIXES)


def is_gpu_pod(pod: PodView, claims: GpuClaims) -> bool:
    if pod.phase not in ACTIVE_PHASES:
        return False
    if pod.gpus > 0:
        return True
    return any(claims is None or claims.get(key, True) for key in pod.claims)


def may_hold_gpu(pod: PodView, claims: GpuClaims) -> bool:
    """Not finished (any phase but Succeeded or Failed) and asking for a GPU: stricter than the
    Operator's filter, for the check that the driver never unloads under a pod."""
    if pod.terminal:
        return False
    return pod.gpus > 0 or any(claims is None or claims.get(key, True) for key in pod.claims)


def gpu_pods(pods: Sequence[Pod], claims: GpuClaims) -> list[Pod]:
    return [p for p in pods if is_gpu_pod(p, claims)]


def claim_allocated_gpu(claim: Mapping[str, object]) -> bool:
    """A ResourceClaim (JSON) whose allocation holds a device of NVIDIA's GPU DRA driver."""
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    if not isinstance(results, Sequence):
        return False
    return any(
        isinstance(r, Mapping) and r.get("driver") == NVIDIA_DRA_DRIVER and r.get("adminAccess") is not True
        for r in results
    )


def claim_index(claims: Sequence[Mapping[str, object]]) -> dict[str, bool]:
    """Claim key -> allocated to an NVIDIA GPU, for a list of ResourceClaims."""
    out = {}
    for claim in claims:
        meta = claim.get("metadata")
        if isinstance(meta, Mapping):
            out[f"{meta.get('namespace', '')}/{meta.get('name', '')}"] = claim_allocated_gpu(claim)
    return out
