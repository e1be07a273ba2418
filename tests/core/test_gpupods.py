"""What a GPU pod is, decided as gpu-operator's `gpuPodSpecFilter` decides it (cmd/gpu-operator/main.go,
and its tests TestGPUPodSpecFilterResourceList / TestGPUPodSpecFilterResourceClaims), from the
pod's JSON as the API server gives it; plus where upgrader counts more (init containers)."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.model.gpupods import claim_allocated_gpu, claim_index, is_gpu_pod
from upgrader.core.model.views import pod_view

NS = "ml"


def _pod(
    containers: list[dict[str, Any]] | None = None,
    *,
    init: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    claims: list[dict[str, Any]] | None = None,
    claim_statuses: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": "n1", "containers": containers or [{"name": "main", "image": "app"}]}
    if init is not None:
        spec["initContainers"] = init
    if claims is not None:
        spec["resourceClaims"] = claims
    status: dict[str, Any] = {"phase": phase}
    if claim_statuses is not None:
        status["resourceClaimStatuses"] = claim_statuses
    return {"metadata": {"name": "p", "namespace": NS, "uid": "u1"}, "spec": spec, "status": status}


def _asks(side: str, resource: str, amount: str = "1") -> dict[str, Any]:
    return {"name": "c", "image": "app", "resources": {side: {"cpu": "1", resource: amount}}}


def _claim(name: str, *results: dict[str, Any], allocated: bool = True) -> dict[str, Any]:
    status = {"allocation": {"devices": {"results": list(results)}}} if allocated else {}
    return {"metadata": {"name": name, "namespace": NS}, "status": status}


GPU_RESULT = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (_pod([_asks("limits", "nvidia.com/gpu")]), True),
        (_pod([_asks("requests", "nvidia.com/gpu")], phase="Pending"), True),
        (_pod([_asks("limits", "nvidia.com/mig-1g.10gb")]), True),  # the MIG slice that used to be missed
        (_pod([_asks("limits", "nvidia.com/mig-3g.40gb", "2")]), True),
        (_pod([_asks("limits", "nvidia.com/gpu.shared")]), True),  # time-slicing's renamed resource
        (_pod([{"name": "a", "image": "x"}, _asks("limits", "nvidia.com/gpu")]), True),  # second container
        (_pod(init=[_asks("limits", "nvidia.com/gpu")]), True),  # ours: init containers count too
        (_pod([_asks("limits", "cpu")]), False),
        (_pod([_asks("limits", "amd.com/gpu")]), False),
        (_pod([_asks("limits", "nvidia.com/gpu")], phase="Succeeded"), False),
        (_pod([_asks("limits", "nvidia.com/gpu")], phase="Failed"), False),
        (_pod([_asks("limits", "nvidia.com/gpu")], phase="Unknown"), False),
    ],
)
def test_gpu_and_mig_resources_make_a_gpu_pod(pod: dict[str, Any], expected: bool) -> None:
    assert is_gpu_pod(pod_view(pod), {}) is expected


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ([_claim("gpu-claim", GPU_RESULT)], True),
        ([_claim("gpu-claim", {**GPU_RESULT, "adminAccess": True})], False),  # a monitoring pod's claim
        ([_claim("gpu-claim", {**GPU_RESULT, "driver": "net.example.com"})], False),
        ([_claim("gpu-claim", allocated=False)], False),
        ([_claim("gpu-claim", {**GPU_RESULT, "driver": "net.example.com"}, GPU_RESULT)], True),
        ([], True),  # the claim cannot be found: counted, as in the Operator
    ],
)
def test_a_claim_of_nvidias_dra_driver_makes_a_gpu_pod(claims: list[dict[str, Any]], expected: bool) -> None:
    pod = _pod(claims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}])
    assert is_gpu_pod(pod_view(pod), claim_index(claims)) is expected


def test_claims_that_cannot_be_read_count_as_gpu_claims() -> None:
    pod = _pod(claims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}])
    assert is_gpu_pod(pod_view(pod), None) is True
    assert is_gpu_pod(pod_view(_pod()), None) is False  # no claim, nothing to read


def test_a_template_claim_is_found_through_the_pod_status() -> None:
    claims = claim_index([_claim("p-gpu-x7k2q", GPU_RESULT)])
    generated = _pod(
        claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        claim_statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-x7k2q"}],
    )
    assert pod_view(generated).claims == (f"{NS}/p-gpu-x7k2q",)
    assert is_gpu_pod(pod_view(generated), claims) is True
    not_yet = _pod(claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    assert pod_view(not_yet).claims == ()
    assert is_gpu_pod(pod_view(not_yet), claims) is False


@pytest.mark.parametrize(
    ("pod", "gpus"),
    [
        (_pod([_asks("limits", "nvidia.com/gpu", "2"), _asks("limits", "nvidia.com/gpu", "3")]), 5),
        (_pod([_asks("limits", "nvidia.com/mig-1g.10gb", "2")]), 2),
        (_pod([_asks("limits", "nvidia.com/gpu")], init=[_asks("limits", "nvidia.com/gpu", "4")]), 4),
        (_pod([_asks("limits", "nvidia.com/gpu", "lots")]), 1),  # unreadable amount: still a GPU pod
    ],
)
def test_the_pods_gpu_count(pod: dict[str, Any], gpus: int) -> None:
    assert pod_view(pod).gpus == gpus


@pytest.mark.parametrize(
    "claim",
    [
        {"metadata": {"name": "c"}},
        {"metadata": {"name": "c"}, "status": None},
        {"metadata": {"name": "c"}, "status": {"allocation": {"devices": {"results": "gpu.nvidia.com"}}}},
        {"metadata": {"name": "c"}, "status": {"allocation": {"devices": {"results": [None, 3]}}}},
    ],
)
def test_a_malformed_claim_is_not_taken_for_an_nvidia_allocation(claim: dict[str, Any]) -> None:
    assert claim_allocated_gpu(claim) is False
