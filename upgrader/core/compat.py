"""Driver / CUDA compatibility (DOMAIN.md §5): may a workload built for CUDA R run on driver D?

R's major picks a window (floor F, upper bound U or none); three paths are tried in order:
* backward: D >= U. A newer driver runs an older toolkit; PTX JIT is fine.
* minor-version: F <= D < U (D >= F with no U). SASS builds only: PTX JIT is not covered.
* forward: D < F. Only with the cuda-compat package in the image, on eligible hardware, on a host
  branch >= 450. The package ships its own PTX JIT compiler, so PTX JIT does not matter here.
Fail closed: an unknown CUDA major or anything malformed is a refusal saying why, never an exception.

Versions are integer tuples compared after padding the shorter with zeros: (525,) is 525.0.0, the
start of branch 525. So 525.60.13 is at or above an upper bound of (525,), 525.60.11 is below a
pinned floor of (525, 60, 13), 525.0 equals 525, and a driver reported as plain "525" counts as
525.0.0, below that pinned floor. Strings and floats are never compared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

Version = tuple[int, ...]
PATHS = ("backward", "minor-version", "forward-compat")
WINDOWS: Mapping[int, tuple[Version, Version | None]] = MappingProxyType(
    {11: ((450,), (525,)), 12: ((525,), (580,)), 13: ((580,), None)}
)
FORWARD_COMPAT_MIN = (450,)  # the cuda-compat package never supports hosts below branch 450

CUDA_RUNTIME = "gpu-upgrader.io/cuda-runtime"
PTX_JIT = "gpu-upgrader.io/ptx-jit"
FORWARD_COMPAT = "gpu-upgrader.io/forward-compat"
FC_ELIGIBLE = "gpu-upgrader.io/forward-compat-eligible"
DRIVER_MAJOR_LABEL = "nvidia.com/cuda.driver.major"

_DIGITS = re.compile(r"[0-9]{1,9}")  # ASCII only: int() also takes "1_000" and non-ASCII digits
_MAX_TEXT = 64


@dataclass(frozen=True)
class Verdict:
    """An answer and its reason. `path` names the compatibility path of an admission by `check` or
    `workload_verdict`; it is None on refusals and on `affinity_verdict`'s answers, which are about
    scheduling, not about a compatibility path."""

    admitted: bool
    path: str | None
    reason: str

    def __post_init__(self) -> None:
        if self.path is not None and (self.path not in PATHS or not self.admitted):
            raise ValueError(f"a verdict's path must be one of {PATHS} on an admission, got {self.path!r}")


def _refuse(reason: str) -> Verdict:
    return Verdict(admitted=False, path=None, reason=reason)


def _show(value: object) -> str:
    """A value for a one-line message: quoted, escaped, cut short."""
    text = repr(value)
    return text if len(text) <= 48 else text[:45] + "..."


def _fmt(version: Version) -> str:
    return ".".join(str(part) for part in version)


def _cmp(a: Version, b: Version) -> int:
    """-1, 0 or 1 as a <, ==, > b, after padding the shorter tuple with zeros (see module doc)."""
    width = max(len(a), len(b))
    pa, pb = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (pa > pb) - (pa < pb)


def parse_version(text: str) -> Version:
    """Text to a version tuple: "525.60.13" -> (525, 60, 13), "12.4" -> (12, 4).

    Only dot-separated ASCII digits, at most 9 per component (leading zeros allowed, as in
    550.90.07). Anything else, whitespace included, is a ValueError that says what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"expected a version such as 525.60.13, got {type(text).__name__} {_show(text)}")
    if not text:
        raise ValueError("the version is empty; expected e.g. 525.60.13")
    if len(text) > _MAX_TEXT:
        raise ValueError(f"version {_show(text)} is longer than {_MAX_TEXT} characters")
    if any(char.isspace() for char in text):
        raise ValueError(f"version {_show(text)} contains whitespace; expected e.g. 525.60.13")
    parts = text.split(".")
    if "" in parts:
        raise ValueError(f"version {_show(text)} has an empty component; expected e.g. 525.60.13")
    bad = next((part for part in parts if not _DIGITS.fullmatch(part)), None)
    if bad is not None:
        where = "" if bad == text else f": {_show(bad)}"
        raise ValueError(f"version {_show(text)}{where} is not a non-negative integer of 1-9 digits")
    return tuple(int(part) for part in parts)


def parse_floors(items: Iterable[str]) -> dict[int, Version]:
    """["12=525.60.13"] -> {12: (525, 60, 13)}: patch-level floors a fleet pins.

    A pinned floor needs a recorded window, may only raise the documented floor, and must stay below
    the window's upper bound. A ValueError names the offending item."""
    if isinstance(items, str):
        raise ValueError(f"expected a list of MAJOR=VERSION items, got the single string {_show(items)}")
    floors: dict[int, Version] = {}
    for item in items:
        if not isinstance(item, str) or item.count("=") != 1:
            raise ValueError(f"floor {_show(item)} is not MAJOR=VERSION, e.g. 12=525.60.13")
        major_text, version_text = item.split("=")
        if not _DIGITS.fullmatch(major_text):
            raise ValueError(f"floor {_show(item)}: CUDA major {_show(major_text)} is not an integer")
        major = int(major_text)
        if major not in WINDOWS:
            raise ValueError(f"floor {_show(item)}: no compatibility rule recorded for CUDA {major}")
        try:
            version = parse_version(version_text)
        except ValueError as exc:
            raise ValueError(f"floor {_show(item)}: {exc}") from None
        floor, upper = WINDOWS[major]
        window = f"the CUDA {major} window"
        if _cmp(version, floor) < 0:
            why = f"the documented floor of {window}; a pinned floor may only raise it"
            raise ValueError(f"floor {_show(item)} is below {_fmt(floor)}, {why}")
        if upper is not None and _cmp(version, upper) >= 0:
            raise ValueError(f"floor {_show(item)} is not below {_fmt(upper)}, the upper bound of {window}")
        if floors.get(major, version) != version:
            raise ValueError(f"floor {_show(item)}: CUDA {major} already has floor {_fmt(floors[major])}")
        floors[major] = version
    return floors


def _floor(floors: object, major: int, documented: Version) -> Version | str:
    """The floor in force for `major` (a pinned floor only ever raises it), or why it is unusable."""
    if floors is None:
        return documented
    if not isinstance(floors, Mapping):
        return f"the pinned floors are not a mapping of CUDA major to version ({type(floors).__name__})"
    pinned = floors.get(major)
    if pinned is None:
        return documented
    if not isinstance(pinned, tuple) or not pinned or not all(type(p) is int and p >= 0 for p in pinned):
        return f"the pinned floor for CUDA {major} is not a version tuple ({_show(pinned)})"
    return pinned if _cmp(pinned, documented) > 0 else documented


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def check(
    driver: str,
    cuda: str,
    *,
    ptx_jit: bool = False,
    forward_compat: bool = False,
    fc_eligible: bool = False,
    floors: Mapping[int, Version] | None = None,
) -> Verdict:
    """May a workload built for CUDA runtime `cuda` run on a node with driver `driver`? Never raises.

    `forward_compat` (the image ships cuda-compat) and `fc_eligible` (the node's hardware qualifies)
    grant only when exactly True; `ptx_jit` restricts when truthy."""
    problems = []
    for what, text in (("driver", driver), ("CUDA", cuda)):
        try:
            parse_version(text)
        except ValueError as exc:
            problems.append(f"cannot read the {what} version: {exc}")
    if problems:
        return _refuse("; ".join(problems))
    have, major = parse_version(driver), parse_version(cuda)[0]
    if major not in WINDOWS:
        known = ", ".join(str(m) for m in sorted(WINDOWS))
        return _refuse(
            f"no compatibility rule recorded for CUDA {major} (rules exist for CUDA {known}); "
            "qualify one before admitting it"
        )
    documented, upper = WINDOWS[major]
    floor = _floor(floors, major, documented)
    if isinstance(floor, str):
        return _refuse(floor)
    window = f"the CUDA {major} window"
    floor_of = f"the {'pinned ' if floor != documented else ''}floor of {window}"

    if upper is not None and _cmp(have, upper) >= 0:
        reason = f"backward compatibility (driver {driver} >= {_fmt(upper)}, the upper bound of {window})"
        return Verdict(True, "backward", reason)
    if _cmp(have, floor) >= 0:
        span = f"at or above {_fmt(floor)}, {floor_of}, " + (
            "which has no upper bound recorded" if upper is None else f"and below its upper bound {_fmt(upper)}"
        )
        if not ptx_jit:
            return Verdict(True, "minor-version", f"minor-version compatibility (driver {driver} is {span})")
        fix = (
            f"ship SASS for the target GPUs (no driver is recorded as backward-covering CUDA {major})"
            if upper is None
            else f"move the node to a driver >= {_fmt(upper)} or ship SASS for the target GPUs"
        )
        return _refuse(f"driver {driver} is {span}, but PTX JIT is not covered by minor-version compatibility: {fix}")

    below, fc_min = f"driver {driver} is below {_fmt(floor)}, {floor_of}", _fmt(FORWARD_COMPAT_MIN)
    missing = []
    if forward_compat is not True:
        missing.append("the cuda-compat package in the workload image")
    if fc_eligible is not True:
        missing.append("hardware eligible for it (data-centre GPU, select NGC-ready RTX system or Jetson)")
    if _cmp(have, FORWARD_COMPAT_MIN) < 0:
        missing.append(f"a host branch >= {fc_min}, which cuda-compat requires")
    if not missing:
        has = f"the image ships cuda-compat, the hardware is eligible, the host branch is >= {fc_min}"
        return Verdict(True, "forward-compat", f"forward compatibility ({below}; {has})")
    return _refuse(
        f"{below}, and forward compatibility would need {_join(missing)}: "
        f"move the node to a driver >= {_fmt(floor)}"
        + ("" if _cmp(have, FORWARD_COMPAT_MIN) < 0 else " or provide what forward compatibility lacks")
    )


def _flag(annotations: Mapping[str, str], key: str, problems: list[str]) -> bool:
    value = annotations.get(key)
    if value not in (None, "true", "false"):
        problems.append(f'annotation {key} is {_show(value)}, not "true" or "false"')
    return value == "true"


def workload_verdict(
    annotations: Mapping[str, str],
    node_labels: Mapping[str, str],
    driver: str,
    floors: Mapping[int, Version] | None = None,
) -> Verdict | None:
    """The verdict for a pod's declared CUDA need on a node running `driver`; None when the pod
    declares no cuda-runtime. Annotation flags are exactly "true" or "false" (absent: false); the
    node is eligible for cuda-compat only with label gpu-upgrader.io/forward-compat-eligible=true."""
    if not isinstance(annotations, Mapping) or CUDA_RUNTIME not in annotations:
        return None
    cuda = annotations[CUDA_RUNTIME]
    problems = []
    try:
        parse_version(cuda)
    except ValueError as exc:
        problems.append(f"annotation {CUDA_RUNTIME} is not a CUDA version: {exc}")
    ptx_jit = _flag(annotations, PTX_JIT, problems)
    forward_compat = _flag(annotations, FORWARD_COMPAT, problems)
    if problems:
        return _refuse("cannot read the pod's CUDA needs: " + "; ".join(problems))
    eligible = isinstance(node_labels, Mapping) and node_labels.get(FC_ELIGIBLE) == "true"
    return check(driver, cuda, ptx_jit=ptx_jit, forward_compat=forward_compat, fc_eligible=eligible, floors=floors)


def _expression(expr: Mapping[str, Any], value: str) -> tuple[bool, str]:
    """Does the label value satisfy one matchExpression on it? And a few words on how."""
    op, values = expr.get("operator"), expr.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return False, f"{op} with unreadable values {_show(values)}"
    if op in ("In", "NotIn"):
        return (value in values) == (op == "In"), f"{op} {values}"
    if op == "Exists":
        return True, op
    if op == "DoesNotExist":
        return False, "DoesNotExist, but a node running a driver has the label"
    if op in ("Gt", "Lt"):
        if len(values) != 1 or not re.fullmatch(r"-?[0-9]{1,18}", values[0]):
            return False, f"{op} needs exactly one integer value, got {values}"
        bound = int(values[0])
        return (int(value) > bound if op == "Gt" else int(value) < bound), f"{op} {bound}"
    return False, f"unknown operator {_show(op)}"


def affinity_verdict(affinity: Mapping[str, Any] | None, driver: str) -> Verdict | None:
    """Would a node running `driver` still satisfy the pod's required node affinity on
    nvidia.com/cuda.driver.major (whose value is the driver's branch, e.g. "550")?

    Terms are ORed, expressions within a term ANDed, and a term that does not mention the label is
    satisfied for it. None when nothing mentions the label; an unreadable affinity is a refusal."""
    found: Any = affinity
    where = "spec.affinity"
    for key in ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"):
        if found is None:
            return None
        if not isinstance(found, Mapping):
            return _refuse(f"cannot read {where}: expected an object, got {type(found).__name__}")
        found, where = found.get(key), f"{where}.{key}"
    if found is None:
        return None
    if not isinstance(found, list) or not all(isinstance(term, Mapping) for term in found):
        return _refuse(f"cannot read {where}: expected a list of terms")
    mentions: list[list[Mapping[str, Any]]] = []
    for index, term in enumerate(found):
        exprs = term.get("matchExpressions") or []
        if not isinstance(exprs, list) or not all(isinstance(e, Mapping) for e in exprs):
            return _refuse(f"cannot read {where}[{index}].matchExpressions: expected a list of objects")
        mentions.append([e for e in exprs if e.get("key") == DRIVER_MAJOR_LABEL])
    if not any(mentions):
        return None
    try:
        value = str(parse_version(driver)[0])
    except ValueError as exc:
        return _refuse(f"cannot tell whether the pod's node affinity allows the driver: {exc}")
    node = f"a node running driver {driver} ({DRIVER_MAJOR_LABEL}={value})"
    notes = []
    for index, exprs in enumerate(mentions):
        results = [_expression(e, value) for e in exprs]
        how = ", ".join(text for _, text in results) or "does not constrain the label"
        if all(ok for ok, _ in results):
            return Verdict(True, None, f"{node} satisfies the pod's required node affinity (term {index}: {how})")
        notes.append(f"term {index}: {how}")
    return _refuse(
        f"{node} would not satisfy the pod's required node affinity ({'; '.join(notes)}), so the pod "
        "could not schedule there: relax the affinity or keep the node on a matching driver branch"
    )
