"""Driver / CUDA compatibility (docs/compatibility.md) for pods: workload_verdict (the pod's CUDA annotations)
and affinity_verdict (required node affinity on the driver-major label)."""

from __future__ import annotations

from typing import Any

import pytest

from upgrader.core.compat.cuda import affinity_verdict, check, workload_verdict
from upgrader.core.model.views import pod_view

from .compat_fixtures import PINNED, one_line

# ----- workload_verdict -------------------------------------------------------------------------------

RUNTIME, PTX, FWD = (
    "gpu-upgrader.io/cuda-runtime",
    "gpu-upgrader.io/ptx-jit",
    "gpu-upgrader.io/forward-compat",
)
ELIGIBLE_KEY = "gpu-upgrader.io/forward-compat-eligible"
ELIGIBLE = {ELIGIBLE_KEY: "true"}

WORKLOADS: list[tuple[dict[str, str], dict[str, str], str, str | None, tuple[str, ...]]] = [
    ({RUNTIME: "12.4"}, {}, "535.104.05", "minor-version", ()),
    ({RUNTIME: "12.4", PTX: "false"}, {}, "535.104.05", "minor-version", ()),
    ({RUNTIME: "12.4", PTX: "true"}, {}, "535.104.05", None, ("PTX JIT is not covered",)),
    ({RUNTIME: "12.4", PTX: "true"}, {}, "580.65.06", "backward", ()),
    ({RUNTIME: "11.8"}, {}, "550.90.07", "backward", ()),
    ({RUNTIME: "12.2", FWD: "true"}, ELIGIBLE, "470.57.02", "forward-compat", ()),
    ({RUNTIME: "12.2", FWD: "true", PTX: "true"}, ELIGIBLE, "470.57.02", "forward-compat", ()),
    ({RUNTIME: "12.2", FWD: "true"}, {}, "470.57.02", None, ("hardware eligible",)),
    ({RUNTIME: "12.2", FWD: "true"}, {ELIGIBLE_KEY: "false"}, "470.57.02", None, ("hardware eligible",)),
    ({RUNTIME: "12.2", FWD: "true"}, {ELIGIBLE_KEY: "True"}, "470", None, ("hardware eligible",)),  # exact
    ({RUNTIME: "12.2", FWD: "true"}, {ELIGIBLE_KEY: "yes"}, "470", None, ("hardware eligible",)),
    ({RUNTIME: "12.2", FWD: "false"}, ELIGIBLE, "470.57.02", None, ("cuda-compat package",)),
    ({RUNTIME: "12.2"}, ELIGIBLE, "470.57.02", None, ("cuda-compat package",)),
    ({RUNTIME: "12.2", FWD: "true"}, ELIGIBLE, "440.33", None, ("host branch >= 450",)),
    ({RUNTIME: "14.0"}, {}, "580.65.06", None, ("no compatibility rule recorded for CUDA 14",)),
    ({RUNTIME: "12.4"}, {}, "abc", None, ("cannot read the driver version",)),
    # malformed annotations: a refusal that names the annotation
    ({RUNTIME: "twelve"}, {}, "535", None, (RUNTIME, "'twelve'")),
    ({RUNTIME: ""}, {}, "535", None, (RUNTIME, "empty")),
    ({RUNTIME: " 12.4"}, {}, "535", None, (RUNTIME, "whitespace")),
    ({RUNTIME: "12.4", PTX: "maybe"}, {}, "580", None, (PTX, "'maybe'")),
    ({RUNTIME: "12.4", PTX: "True"}, {}, "580", None, (PTX, "'True'")),
    ({RUNTIME: "12.4", PTX: ""}, {}, "580", None, (PTX,)),
    ({RUNTIME: "12.2", FWD: "yes"}, ELIGIBLE, "470", None, (FWD, "'yes'")),
    ({RUNTIME: "twelve", PTX: "maybe", FWD: "1"}, {}, "535", None, (RUNTIME, PTX, FWD)),
]


@pytest.mark.parametrize(("annotations", "labels", "driver", "path", "words"), WORKLOADS)
def test_workload_verdict(
    annotations: dict[str, str], labels: dict[str, str], driver: str, path: str | None, words: tuple[str, ...]
) -> None:
    verdict = workload_verdict(annotations, labels, driver)
    assert verdict is not None
    one_line(verdict)
    assert verdict.admitted is (path is not None)
    assert verdict.path == path
    for word in words:
        assert word in verdict.reason, verdict.reason


@pytest.mark.parametrize("annotations", [{}, {PTX: "true", FWD: "true"}, {"other": "12.4"}])
def test_workload_without_a_cuda_runtime_has_no_verdict(annotations: dict[str, str]) -> None:
    assert workload_verdict(annotations, ELIGIBLE, "470") is None


def test_workload_verdict_passes_pinned_floors_on() -> None:
    assert workload_verdict({RUNTIME: "12.0"}, {}, "525.60.11") == check("525.60.11", "12.0")
    pinned = workload_verdict({RUNTIME: "12.0"}, {}, "525.60.11", floors=PINNED)
    assert pinned is not None and not pinned.admitted and "525.60.13" in pinned.reason


def test_workload_verdict_reads_a_pod_view() -> None:
    pod = pod_view(
        {
            "metadata": {"namespace": "ml", "name": "train", "annotations": {RUNTIME: "12.4", PTX: "true"}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": "train:1"}]},
        }
    )
    verdict = workload_verdict(pod.annotations, {}, "535.104.05")
    assert verdict is not None and not verdict.admitted and "PTX JIT" in verdict.reason


# ----- affinity_verdict -------------------------------------------------------------------------------

LABEL = "nvidia.com/cuda.driver.major"


def expr(op: str, *values: str, key: str = LABEL) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


def required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": term} for term in terms]
            }
        }
    }


AFFINITIES: list[tuple[dict[str, Any], str, bool, tuple[str, ...]]] = [
    (required([expr("In", "550")]), "550.90.07", True, (f"{LABEL}=550", "In ['550']")),
    (required([expr("In", "535", "550")]), "550.90.07", True, ()),
    (required([expr("In", "535")]), "550.90.07", False, ("would not satisfy", "In ['535']")),
    (required([expr("In", "0550")]), "550", False, ()),  # label values compare as the scheduler does
    (required([expr("NotIn", "535")]), "550.90.07", True, ()),
    (required([expr("NotIn", "535", "550")]), "550.90.07", False, ("NotIn",)),
    (required([expr("Gt", "535")]), "550.90.07", True, ("Gt 535",)),
    (required([expr("Gt", "550")]), "550.90.07", False, ("Gt 550",)),  # strictly greater
    (required([expr("Gt", "99")]), "100", True, ()),  # integers, not strings: "100" > "99"
    (required([expr("Lt", "560")]), "550.90.07", True, ()),
    (required([expr("Lt", "550")]), "550.90.07", False, ("Lt 550",)),
    (required([expr("Lt", "1000")]), "999", True, ()),
    (required([expr("Gt", "abc")]), "550", False, ("Gt needs exactly one integer value",)),
    (required([expr("Gt", "500", "600")]), "550", False, ("exactly one integer value",)),
    (required([expr("Lt")]), "550", False, ("exactly one integer value",)),
    (required([expr("Exists")]), "550.90.07", True, ("Exists",)),
    (required([expr("DoesNotExist")]), "550.90.07", False, ("DoesNotExist",)),
    (required([expr("Like", "5*")]), "550", False, ("unknown operator 'Like'",)),
    (required([{"key": LABEL, "operator": "In", "values": "550"}]), "550", False, ("unreadable values",)),
    # expressions within a term are ANDed; other labels are not this check's business
    (required([expr("Gt", "530"), expr("Lt", "560")]), "550.90.07", True, ("Gt 530, Lt 560",)),
    (required([expr("Gt", "530"), expr("Lt", "560")]), "570.1", False, ()),
    (required([expr("In", "550"), expr("In", "H100", key="nvidia.com/gpu.product")]), "550", True, ()),
    # terms are ORed
    (required([expr("In", "535")], [expr("In", "550")]), "550.90.07", True, ("term 1",)),
    (required([expr("In", "535")], [expr("In", "550")]), "570.1", False, ("term 0", "term 1")),
    (required([expr("In", "535")], [expr("Exists", key="pool")]), "570.1", True, ("does not constrain",)),
    (required([expr("In", "535")], []), "570.1", True, ("term 1",)),
    # an unreadable driver, once the label matters
    (required([expr("In", "550")]), "abc", False, ("cannot tell", "'abc'")),
    (required([expr("Exists")]), "", False, ("empty",)),
]


@pytest.mark.parametrize(("affinity", "driver", "admitted", "words"), AFFINITIES)
def test_affinity_verdict(
    affinity: dict[str, Any], driver: str, admitted: bool, words: tuple[str, ...]
) -> None:
    verdict = affinity_verdict(affinity, driver)
    assert verdict is not None
    one_line(verdict)
    assert verdict.admitted is admitted
    assert verdict.path is None  # a scheduling answer, not a compatibility path
    for word in words:
        assert word in verdict.reason, verdict.reason


PREFERRED = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [expr("In", "535")]}}
        ]
    }
}


@pytest.mark.parametrize(
    "affinity",
    [
        None,
        {},
        {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}},
        {"nodeAffinity": {}},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
        PREFERRED,  # only required affinity blocks scheduling
        required([expr("In", "H100", key="nvidia.com/gpu.product")]),
        required([], [expr("Exists", key="pool")]),
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
                    ]
                }
            }
        },
    ],
)
def test_affinity_that_does_not_mention_the_label_has_no_verdict(affinity: dict[str, Any] | None) -> None:
    assert affinity_verdict(affinity, "550.90.07") is None
    assert affinity_verdict(affinity, "not a version") is None  # the driver does not matter then


@pytest.mark.parametrize(
    ("affinity", "words"),
    [
        ("nodeAffinity", "cannot read spec.affinity: expected an object, got str"),
        ({"nodeAffinity": []}, "cannot read spec.affinity.nodeAffinity: expected an object"),
        (
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": {}}}},
            "nodeSelectorTerms: expected a list of terms",
        ),
        (
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": ["x"]}
                }
            },
            "expected a list of terms",
        ),
        (
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": {"key": LABEL}}]
                    }
                }
            },
            "nodeSelectorTerms[0].matchExpressions",
        ),
        (required(["In 550"]), "nodeSelectorTerms[0].matchExpressions"),  # type: ignore[list-item]
    ],
)
def test_unreadable_affinity_is_a_refusal(affinity: Any, words: str) -> None:
    verdict = affinity_verdict(affinity, "550.90.07")
    assert verdict is not None and not verdict.admitted and words in verdict.reason, verdict
