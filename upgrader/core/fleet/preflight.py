"""The per-node preflight `plan` reports and `run` enforces: the precompiled driver image (ledger and
registry), the compatibility profile and the CUDA needs of the node's workloads on the new driver.

One judgement serves both: `plan` lists every finding, `run` holds a node whose judgement has a
blocking finding at upgrade-required (`hold`), so it never cordons or evicts a node `plan` calls
blocked. An input that was asked for and cannot be read (a ledger ConfigMap that is gone, a registry
that does not answer) holds the node too, and says so: the tool cannot judge, so it refuses.
See docs/policy.md#preflight.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from upgrader.core.compat.cuda import Floors
from upgrader.core.compat.images import node_image_tag
from upgrader.core.compat.profiles import Profile
from upgrader.core.fleet.managed import fleet
from upgrader.core.fleet.node_findings import cuda_findings, profile_findings
from upgrader.core.model.findings import BLOCKING, Finding
from upgrader.core.model.states import HELD, HELD_KIND, HELD_REASON, HELD_SINCE, State
from upgrader.core.model.timefmt import rfc3339
from upgrader.core.model.views import DriverSet, NodeView, PodView, Snapshot
from upgrader.core.node.context import context
from upgrader.core.policy.policy import Policy
from upgrader.core.report.kinds import hold_runbook

# What a registry said of one image reference: present, absent, or why it could not say.
PRESENT = "present"
ABSENT = "absent"


@dataclass(frozen=True)
class RegistryAnswer:
    verdict: str  # PRESENT, ABSENT, or "unknown"
    detail: str = ""  # the registry's words, or why it could not be asked


@dataclass(frozen=True)
class PreflightInputs:
    """What the preflight judges against. None: not asked for (that check is off). An `*_error` says
    an input that was asked for could not be read this pass: every node it would judge is held."""

    ledger: frozenset[str] | None = None
    ledger_error: str | None = None
    ledger_source: str = "the ledger"
    profiles: Sequence[Profile] | None = None
    profiles_error: str | None = None
    floors: Floors = field(default_factory=dict)
    registry: Mapping[str, RegistryAnswer] | None = None  # image reference -> answer; None: not asked

    @property
    def asks(self) -> bool:
        """Whether anything beyond the CUDA check (always on) was asked for."""
        return any(
            x is not None
            for x in (self.ledger, self.ledger_error, self.profiles, self.profiles_error, self.registry)
        )


@dataclass(frozen=True)
class Preflight:
    """What `run` judges starts by: the inputs, and how to read a node's pods for the CUDA check
    (the controller LISTs them, once per node judged; None: only the pods the snapshot holds)."""

    inputs: PreflightInputs = field(default_factory=PreflightInputs)
    pods_of: Callable[[str], list[PodView]] | None = None


@dataclass(frozen=True)
class Hold:
    """Why `run` keeps a node at upgrade-required: a blocking finding's kind (a `HoldKind`, or one
    read back from the node) and words, its runbook."""

    kind: str
    reason: str

    @property
    def runbook(self) -> str:
        return hold_runbook(self.kind)


def image_reference(driver_set: DriverSet | None, tag: str) -> str | None:
    """`nvcr.io/nvidia/driver:<tag>`: the driver DaemonSet's image repository with the node's tag."""
    image = driver_set.image if driver_set else None
    if not image:
        return None
    name = image.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    repository = name[:colon] if colon > slash else name
    return f"{repository}:{tag}"


def image_findings(
    node: NodeView, tag: str, reference: str | None, inputs: PreflightInputs
) -> list[Finding]:
    """`missing-driver-image` from the ledger and from the registry, when either was asked for."""
    out = []
    if inputs.ledger_error is not None:
        out.append(Finding("preflight-input", BLOCKING, node.name, f"cannot check image {tag}: {inputs.ledger_error}"))
    elif inputs.ledger is not None and tag not in inputs.ledger:
        out.append(
            Finding(
                "missing-driver-image",
                BLOCKING,
                node.name,
                f"no precompiled driver image {tag} in {inputs.ledger_source}: its driver pod would "
                "fail to pull and its GPUs drop out; build and push that image first",
            )
        )
    if inputs.registry is None:
        return out
    answer = inputs.registry.get(reference or "")
    if reference is None:
        out.append(Finding("preflight-input", BLOCKING, node.name, "cannot ask the registry: no driver image known"))
    elif answer is None or answer.verdict not in (PRESENT, ABSENT):
        why = answer.detail if answer else "not asked yet"
        out.append(
            Finding(
                "preflight-input",
                BLOCKING,
                node.name,
                f"cannot tell whether {reference} exists: {why}; held until the registry answers",
            )
        )
    elif answer.verdict == ABSENT:
        out.append(
            Finding(
                "missing-driver-image",
                BLOCKING,
                node.name,
                f"the registry has no {reference} ({answer.detail}): its driver pod would fail to pull and its "
                "GPUs drop out; build and push that image first",
            )
        )
    return out


def node_findings(
    node: NodeView,
    target_driver: str,
    driver_set: DriverSet | None,
    pods: Sequence[PodView] | None,
    inputs: PreflightInputs,
    now: float,
    restart_only: bool = False,
) -> list[Finding]:
    """The preflight's findings for one node moving to `target_driver`. `pods` None: not read (the
    CUDA check is then left out). A restart-only upgrade keeps its driver: only its image is judged."""
    out: list[Finding] = []
    try:
        tag: str | None = node_image_tag(node, target_driver)
    except ValueError as exc:
        tag = None
        out.append(Finding("invalid-node-data", BLOCKING, node.name, f"cannot compute the driver image: {exc}"))
    if tag is not None:
        out.extend(image_findings(node, tag, image_reference(driver_set, tag), inputs))
    if restart_only:
        return out
    if inputs.profiles_error is not None:
        out.append(Finding("preflight-input", BLOCKING, node.name, f"cannot check profiles: {inputs.profiles_error}"))
    elif inputs.profiles is not None:
        out.extend(profile_findings(node, target_driver, inputs.profiles, now))
    if pods is not None:
        out.extend(cuda_findings(node, list(pods), target_driver, inputs.floors))
    return out


def hold(findings: Sequence[Finding]) -> Hold | None:
    """The first blocking finding, as a hold; None when the node may start."""
    first = next((f for f in findings if f.severity == BLOCKING), None)
    if first is None:
        return None
    more = sum(1 for f in findings if f.severity == BLOCKING) - 1
    return Hold(first.kind, first.message + (f" (and {more} more finding{'s' if more > 1 else ''})" if more else ""))


def hold_marks(node: NodeView, holding: Hold | None, now: float) -> tuple[dict[str, str | None], str | None]:
    """The node's hold record as it should be, and the Event text when it changed (None: no Event).
    A hold keeps its `since` while its kind stays; a node that passes has its record cleared."""
    if holding is None:
        if not node.annotations.get(HELD_KIND):
            return {}, None
        return dict.fromkeys(HELD), f"no longer held at upgrade-required ({node.annotations[HELD_KIND]})"
    same_kind = node.annotations.get(HELD_KIND) == holding.kind
    since = (node.annotations.get(HELD_SINCE) if same_kind else None) or rfc3339(now)
    wanted: dict[str, str | None] = {HELD_KIND: holding.kind, HELD_REASON: holding.reason, HELD_SINCE: since}
    if all(node.annotations.get(k) == v for k, v in wanted.items()):
        return {}, None
    return wanted, f"held at upgrade-required since {since}: {holding.kind}: {holding.reason}; see {holding.runbook}"


def clear_held(node: NodeView) -> dict[str, str | None]:
    return dict.fromkeys(HELD) if node.annotations.get(HELD_KIND) else {}


def registry_references(snapshot: Snapshot, policy: Policy) -> set[str]:
    """The images the registry check asks about this pass: those of managed nodes at
    upgrade-required, from their DaemonSet's repository and driver and their kernel and OS."""
    out = set()
    for node in fleet(snapshot).managed:
        if node.state is not State.UPGRADE_REQUIRED:
            continue
        ds = context(snapshot, node.name, policy).driver_set
        if ds is None or ds.driver_version is None:
            continue
        try:
            reference = image_reference(ds, node_image_tag(node, ds.driver_version))
        except ValueError:
            continue  # the node's own finding says why
        if reference is not None:
            out.add(reference)
    return out
