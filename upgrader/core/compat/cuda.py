"""Driver / CUDA compatibility (docs/compatibility.md): may a workload built for CUDA release X.Y[.Z] run on driver D?

X's window gives the floor F (the major's minimum driver); the release's toolkit driver T comes from
NVIDIA's table (`upgrader.core.compat.cuda_releases`). Three paths are tried in order:
* backward: D >= T. A driver at or above the one packaged with the toolkit; PTX JIT is fine.
* minor-version: F <= D < T. SASS builds only: PTX JIT is not covered.
* forward: D < F. Only with the cuda-compat package in the image, on eligible hardware, on a host
  branch >= 450. The package ships its own PTX JIT compiler, so PTX JIT does not matter here.
Fail closed: an unknown CUDA major, a release the table lacks, or anything malformed is a refusal
saying why, never an exception. Every toolkit driver of a major is below its window's upper bound
U, so every driver at or above U is backward compatible with the whole major (a test checks this).

Versions are integer tuples compared after padding the shorter with zeros: (525,) is 525.0.0, the
start of branch 525. So 525.60.13 is at or above an upper bound of (525,), 525.60.11 is below a
pinned floor of (525, 60, 13), 525.0 equals 525, and a driver reported as plain "525" counts as
525.0.0, below that pinned floor. Strings and floats are never compared.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from upgrader.core.compat.cuda_releases import NEWEST, RELEASES, lookup, siblings

Version = tuple[int, ...]
Floors = Mapping[int | Version, Version]  # a major -> its floor; a release X.Y[.Z] -> its toolkit driver
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


def parse_release(text: str) -> Version:
    """A CUDA release as a workload names it: "12.4" (its GA) or "12.4.1" (that release) -> a tuple.

    A ValueError says what is wrong: a bare major cannot pick a toolkit driver, and four parts are
    a component's version (cudart 12.4.127 is not a toolkit release)."""
    version = parse_version(text)
    if len(version) not in (2, 3):
        raise ValueError(f"CUDA release {_show(text)} is not X.Y or X.Y.Z, e.g. 12.4 or 12.4.1")
    return version


def _floor_key(item: str, key: str) -> int | Version:
    """A --floor's left side: a CUDA major (its window's floor) or a release X.Y[.Z] (its toolkit driver)."""
    if _DIGITS.fullmatch(key):
        return int(key)
    try:
        return parse_release(key)
    except ValueError:
        raise ValueError(f"floor {_show(item)}: {_show(key)} is not a CUDA major or a release X.Y[.Z]") from None


def _check_pin(item: str, key: int | Version, version: Version) -> None:
    """A pin must fit the major's window and may only raise what NVIDIA documents."""
    major = key if isinstance(key, int) else key[0]
    if major not in WINDOWS:
        raise ValueError(f"floor {_show(item)}: no compatibility rule recorded for CUDA {major}")
    floor, upper = WINDOWS[major]
    window = f"the CUDA {major} window"
    if _cmp(version, floor) < 0:
        why = f"the documented floor of {window}; a pinned floor may only raise it"
        raise ValueError(f"floor {_show(item)} is below {_fmt(floor)}, {why}")
    if upper is not None and _cmp(version, upper) >= 0:
        raise ValueError(f"floor {_show(item)} is not below {_fmt(upper)}, the upper bound of {window}")
    known = lookup(key) if isinstance(key, tuple) else None
    if known is not None and _cmp(version, known.driver) < 0:
        why = f"{known.what}; a pinned floor may only raise it"
        raise ValueError(f"floor {_show(item)} is below {known.driver_text}, {why}")


def parse_floors(items: Iterable[str]) -> dict[int | Version, Version]:
    """Floors a fleet pins: ["12=525.60.13"] -> {12: (525, 60, 13)}; ["13.6=600.1"] -> {(13, 6): (600, 1)}.

    A major's pin raises its minor-version floor; a release's pin is its toolkit driver, for a
    release the table does not list yet (or to raise a listed one). Each needs a recorded window,
    may only raise what is documented, and must stay below the window's upper bound. A ValueError
    names the offending item."""
    if isinstance(items, str):
        raise ValueError(f"expected a list of MAJOR=VERSION items, got the single string {_show(items)}")
    floors: dict[int | Version, Version] = {}
    for item in items:
        if not isinstance(item, str) or item.count("=") != 1:
            raise ValueError(f"floor {_show(item)} is not MAJOR=VERSION or X.Y[.Z]=VERSION, e.g. 12=525.60.13")
        key_text, version_text = item.split("=")
        key = _floor_key(item, key_text)
        try:
            version = parse_version(version_text)
        except ValueError as exc:
            raise ValueError(f"floor {_show(item)}: {exc}") from None
        _check_pin(item, key, version)
        if floors.get(key, version) != version:
            what = f"CUDA {key}" if isinstance(key, int) else f"CUDA {_fmt(key)}"
            raise ValueError(f"floor {_show(item)}: {what} already has floor {_fmt(floors[key])}")
        floors[key] = version
    return floors


def _pinned(floors: Mapping[Any, Any], key: int | Version) -> Version | str | None:
    """The pin under `key`, None when there is none, or why it is unusable."""
    pinned = floors.get(key)
    if pinned is None:
        return None
    if not isinstance(pinned, tuple) or not pinned or not all(type(p) is int and p >= 0 for p in pinned):
        what = f"CUDA {key}" if isinstance(key, int) else f"CUDA {_fmt(key)}"
        return f"the pinned floor for {what} is not a version tuple ({_show(pinned)})"
    return pinned


def _floor(floors: object, major: int, documented: Version) -> Version | str:
    """The floor in force for `major` (a pinned floor only ever raises it), or why it is unusable."""
    if floors is None:
        return documented
    if not isinstance(floors, Mapping):
        return f"the pinned floors are not a mapping of CUDA major to version ({type(floors).__name__})"
    pinned = _pinned(floors, major)
    if pinned is None or isinstance(pinned, str):
        return pinned or documented
    return pinned if _cmp(pinned, documented) > 0 else documented


def _toolkit(floors: Mapping[Any, Any] | None, release: Version, text: str) -> tuple[Version, str, str] | str:
    """The toolkit driver in force for `release`, as text, and whose it is; or why there is none.

    NVIDIA's row, raised by a pin on the release (X.Y.Z, then X.Y); an unlisted release has only its pin."""
    known = lookup(release)
    best = None if known is None else (known.driver, known.driver_text, known.what)
    keys = [release] if len(release) == 2 else [release, release[:2]]
    for key in keys:
        pinned = None if floors is None else _pinned(floors, key)
        if isinstance(pinned, str):
            return pinned
        if pinned is not None and (best is None or _cmp(pinned, best[0]) > 0):
            best = (pinned, _fmt(pinned), f"the pinned toolkit driver of CUDA {_fmt(key)}")
    if best is not None:
        return best
    listed = siblings(release)
    seen = (
        f"the table lists {_join([r.label for r in listed])} of {_fmt(release[:2])}"
        if listed
        else f"the table lists CUDA {_fmt(min(RELEASES)[:2])} to {NEWEST.label}"
    )
    return (
        f"CUDA {text} is not in the toolkit-driver table ({seen}), so backward and minor-version "
        f"compatibility cannot be told apart: the table needs that release; meanwhile pin its toolkit "
        f"driver from NVIDIA's release notes with --floor {text}=DRIVER"
    )


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def check(
    driver: str,
    cuda: str,
    *,
    ptx_jit: bool = False,
    forward_compat: bool = False,
    fc_eligible: bool = False,
    floors: Floors | None = None,
) -> Verdict:
    """May a workload built for CUDA release `cuda` (X.Y or X.Y.Z) run on driver `driver`? Never raises.

    `forward_compat` (the image ships cuda-compat) and `fc_eligible` (the node's hardware qualifies)
    grant only when exactly True; `ptx_jit` restricts when truthy."""
    problems = []
    for what, text, parse in (("driver", driver, parse_version), ("CUDA", cuda, parse_release)):
        try:
            parse(text)
        except ValueError as exc:
            problems.append(f"cannot read the {what} version: {exc}")
    if problems:
        return _refuse("; ".join(problems))
    have, release = parse_version(driver), parse_release(cuda)
    major = release[0]
    if major not in WINDOWS:
        known = ", ".join(str(m) for m in sorted(WINDOWS))
        return _refuse(
            f"no compatibility rule recorded for CUDA {major} (rules exist for CUDA {known}); "
            "qualify one before admitting it"
        )
    documented, _ = WINDOWS[major]
    floor = _floor(floors, major, documented)
    if isinstance(floor, str):
        return _refuse(floor)
    toolkit = _toolkit(floors, release, cuda)
    if isinstance(toolkit, str):
        return _refuse(toolkit)
    needed, needed_text, of_release = toolkit
    floor_of = f"the {'pinned ' if floor != documented else ''}floor of the CUDA {major} window"

    if _cmp(have, needed) >= 0:
        return Verdict(True, "backward", f"backward compatibility (driver {driver} >= {needed_text}, {of_release})")
    if _cmp(have, floor) >= 0:
        span = f"at or above {_fmt(floor)}, {floor_of}, and below {needed_text}, {of_release}"
        if not ptx_jit:
            return Verdict(True, "minor-version", f"minor-version compatibility (driver {driver} is {span})")
        fix = f"move the node to a driver >= {needed_text} or ship SASS for the target GPUs"
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
    floors: Floors | None = None,
) -> Verdict | None:
    """The verdict for a pod's declared CUDA need on a node running `driver`; None when the pod
    declares no cuda-runtime. Annotation flags are exactly "true" or "false" (absent: false); the
    node is eligible for cuda-compat only with label gpu-upgrader.io/forward-compat-eligible=true."""
    if not isinstance(annotations, Mapping) or CUDA_RUNTIME not in annotations:
        return None
    eligible = isinstance(node_labels, Mapping) and node_labels.get(FC_ELIGIBLE) == "true"
    need = (annotations[CUDA_RUNTIME], annotations.get(PTX_JIT), annotations.get(FORWARD_COMPAT))
    if not all(v is None or isinstance(v, str) for v in (*need, driver)):
        return _workload_verdict(*need, eligible, driver, tuple((floors or {}).items()))
    # A fleet's pods declare a handful of distinct needs: judged once each, not once per pod.
    return _remembered_verdict(*need, eligible, driver, tuple((floors or {}).items()))


def _workload_verdict(
    cuda: Any, ptx: Any, fc: Any, eligible: bool, driver: str, floors: tuple[tuple[int | Version, Version], ...]
) -> Verdict:
    problems = []
    try:
        parse_release(cuda)
    except ValueError as exc:
        problems.append(f"annotation {CUDA_RUNTIME} is not a CUDA release: {exc}")
    ptx_jit = _flag({PTX_JIT: ptx} if ptx is not None else {}, PTX_JIT, problems)
    forward_compat = _flag({FORWARD_COMPAT: fc} if fc is not None else {}, FORWARD_COMPAT, problems)
    if problems:
        return _refuse("cannot read the pod's CUDA needs: " + "; ".join(problems))
    flags = {"ptx_jit": ptx_jit, "forward_compat": forward_compat, "fc_eligible": eligible}
    return check(driver, cuda, **flags, floors=dict(floors))


_remembered_verdict = functools.lru_cache(maxsize=4096)(_workload_verdict)


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
