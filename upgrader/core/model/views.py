"""Plain views of cluster objects, built from the API's JSON: what every decision reads.

Parsing is pure so the controller, `plan --from-file` and tests share it. Anything malformed is
kept as a reason (`NodeView.invalid`), never guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from upgrader.core.model.alerts import AlertReading
from upgrader.core.model.gpupods import GpuClaims
from upgrader.core.model.placement import (
    Taint,
    Toleration,
    gpu_allocatable,
    gpu_demand,
    taints,
    tolerations,
)
from upgrader.core.model.selectors import LabelSelector, SelectorError, from_label_selector_object
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.model.timefmt import parse_or_none
from upgrader.core.report.document import RolloutStatus

Obj = Mapping[str, Any]
GPU = "nvidia.com/gpu"
HASH_LABEL = "controller-revision-hash"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str
    node: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    phase: str
    ready: bool
    terminating: bool
    gpus: int
    owner_kind: str | None
    owner_name: str | None
    empty_dir: bool
    mirror: bool
    waiting_reason: str | None = None
    waiting_message: str | None = None
    images: tuple[str, ...] = ()
    affinity: Mapping[str, Any] | None = None  # spec.affinity, for nodeAffinity on driver labels
    claims: tuple[str, ...] = ()  # the ResourceClaims it holds, "namespace/name"
    config_digest: str | None = None  # DRIVER_CONFIG_DIGEST (driver pods of GPU Operator v26.3 and later)
    created: float | None = None  # metadata.creationTimestamp
    gpu_requests: Mapping[str, int] = field(default_factory=dict)  # per GPU/MIG resource (`placement`)
    node_selector: Mapping[str, str] = field(default_factory=dict)  # spec.nodeSelector
    tolerations: tuple[Toleration, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def revision_hash(self) -> str | None:
        return self.labels.get(HASH_LABEL)


@dataclass(frozen=True)
class NodeView:
    name: str
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    unschedulable: bool
    ready: bool
    gpu_allocatable: str | None
    gpu_capacity: str | None
    kernel: str
    os_image: str
    state: State | None
    invalid: str | None = None  # why the node's upgrade label cannot be read
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, int] = field(default_factory=dict)  # GPU and MIG resources only

    def with_changes(self, state: State | None, annotations: Mapping[str, str | None]) -> NodeView:
        merged = dict(self.annotations)
        for key, value in annotations.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        labels = dict(self.labels)
        if state is not None:
            labels[STATE_LABEL] = state.value
        return replace(self, state=state if state is not None else self.state, labels=labels, annotations=merged)

    def with_labels(self, labels: Mapping[str, str | None]) -> NodeView:
        """The node with `labels` set (str) or removed (None); the state label is not among them."""
        merged = dict(self.labels)
        for key, value in labels.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return replace(self, labels=merged)


@dataclass(frozen=True)
class PdbView:
    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int
    current_healthy: int
    desired_healthy: int
    expected_pods: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, pod: PodView) -> bool:
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


@dataclass(frozen=True)
class DriverSet:
    """A driver DaemonSet and its newest ControllerRevision."""

    namespace: str
    name: str
    node_selector: Mapping[str, str]
    newest_hash: str | None
    newest_revision: int
    driver_version: str | None
    image: str | None
    config_digest: str | None = None  # the template's DRIVER_CONFIG_DIGEST
    images: tuple[str, ...] = ()  # the template's container images, in order
    update_strategy: str = "OnDelete"  # spec.updateStrategy.type (the API server's default: RollingUpdate)
    owner: tuple[str, str] | None = None  # the controlling owner's (kind, name): ClusterPolicy, NVIDIADriver

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, node: NodeView) -> bool:
        return all(node.labels.get(k) == v for k, v in self.node_selector.items())


@dataclass(frozen=True)
class Interlock:
    """Something that must not drive the drivers beside upgrader (core/fleet/interlocks.py), in one line."""

    kind: str  # gpu-operator-auto-upgrade | driver-update-strategy (the plan finding's kind)
    text: str


@dataclass(frozen=True)
class Control:
    """What operators set (`upgrader pause/resume/acknowledge`, or kubectl, on the control object): a
    pause, and acknowledged failures, each named by the node and its failure as the controller
    recorded it (`gpu-upgrader.io/failed-at`, compared as text: no clock is compared). `kept` says why
    a pause holds though its object is gone (the last status recorded it)."""

    paused: bool = False
    acknowledged: Mapping[str, str] = field(default_factory=dict)  # node -> its failed-at when acknowledged
    promoted: Mapping[str, str] = field(default_factory=dict)  # stage -> its finish when promoted (rollout/stages.py)
    previous: RolloutStatus | None = None  # the last status written (None: none, or none this version reads)
    kept: str | None = None


@dataclass
class Snapshot:
    nodes: dict[str, NodeView]
    driver_pods: dict[str, list[PodView]]  # node -> driver pods on it
    node_pods: dict[str, list[PodView]]  # node -> all its pods, for the nodes being worked on
    pdbs: list[PdbView]
    driver_sets: list[DriverSet]
    control: Control = field(default_factory=Control)
    # The ResourceClaims of the listed pods: allocated to an NVIDIA GPU or not (None: unreadable).
    gpu_claims: GpuClaims = field(default_factory=dict)
    # With an alertGate in the policy: what Prometheus said this pass (None: not asked).
    alerts: AlertReading | None = None
    # Why upgrader must not drive the drivers now (core/fleet/interlocks.py): the GPU Operator's own upgrade
    # controller is on, or a driver DaemonSet is not OnDelete. Empty: nothing stands in the way.
    interlocks: tuple[Interlock, ...] = ()
    # Under gpuCapacity.onInsufficient: wait, every node's pods and the GPU claims they hold, read when
    # a start is first judged against the room (never in a pass that can start nothing).
    fleet_pods: Callable[[], tuple[dict[str, list[PodView]], GpuClaims]] | None = None
    # A node's pods, read when a start is judged against its PodDisruptionBudgets (core/fleet/pdb_choice.py),
    # once a pass a node; None: not readable here (the start is made without that judgement).
    candidate_pods: Callable[[str], list[PodView]] | None = None
    # Each node's facts carried from the controller's earlier passes: a node/facts.py FactsCarry
    # (typed loosely: node/facts.py reads the views); None: none kept.
    carry: Any = field(default=None, repr=False, compare=False)
    # Results derived from this snapshot alone (the fleet split), computed once: a pass asks for them
    # several times. Not copied by dataclasses.replace, so a changed snapshot starts empty.
    memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def driver_set_of(self, pod: PodView) -> DriverSet | None:
        return next((d for d in self.driver_sets if d.namespace == pod.namespace and d.name == pod.owner_name), None)


FOLDED = "folded"  # Snapshot.memo key: a pass's own writes made this snapshot from another


@dataclass(frozen=True)
class Folded:
    """What `rollout.project` changed: the nodes it gave new views, in a snapshot whose driver pods
    and DaemonSets are the other's; with the other's node facts (None: not worked out)."""

    facts: Any
    driver_pods: dict[str, list[PodView]]
    nodes: frozenset[str]


# ----- JSON -> views ---------------------------------------------------------------------------


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _str_map(value: Any) -> dict[str, str]:
    if not value or not isinstance(value, Mapping):
        return {}
    try:  # as the API server sends them, keys and values are all strings: copied as they are
        "".join(value)
        "".join(value.values())
        return dict(value)
    except TypeError:
        return {str(k): str(v) for k, v in value.items()}


def _claim_keys(namespace: str, spec: Obj, status: Obj) -> tuple[str, ...]:
    """The ResourceClaims a pod holds: named ones, and those generated from a template once the
    pod's status names them (a template claim not generated yet holds nothing)."""
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in status.get("resourceClaimStatuses") or []
        if isinstance(s, Mapping)
    }
    keys = []
    for ref in spec.get("resourceClaims") or []:
        if not isinstance(ref, Mapping):
            continue
        name = ref.get("resourceClaimName") or generated.get(str(ref.get("name")))
        if name:
            keys.append(f"{namespace}/{name}")
    return tuple(keys)


DIGEST_ENV = "DRIVER_CONFIG_DIGEST"


def config_digest(pod_spec: Any) -> str | None:
    """The GPU Operator's DRIVER_CONFIG_DIGEST of a pod spec: the first non-empty value, init
    containers first (where k8s-driver-manager carries it), as the Operator reads it."""
    if not isinstance(pod_spec, Mapping):
        return None
    for key in ("initContainers", "containers"):
        containers = pod_spec.get(key)
        for container in containers if isinstance(containers, list) else ():
            env = container.get("env") if isinstance(container, Mapping) else None
            for var in env if isinstance(env, list) else ():
                if isinstance(var, Mapping) and var.get("name") == DIGEST_ENV and var.get("value"):
                    return str(var["value"])
    return None


def pod_view(obj: Obj) -> PodView:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    images = [str(c.get("image", "")) for c in spec.get("containers") or []]
    gpus, requests = gpu_demand(spec)
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    waiting = next(
        (
            cs["state"]["waiting"]
            for cs in status.get("containerStatuses") or []
            if "waiting" in (cs.get("state") or {})
        ),
        None,
    )
    annotations = _str_map(meta.get("annotations"))
    namespace = str(meta.get("namespace", ""))
    return PodView(
        namespace=namespace,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node=str(spec.get("nodeName") or ""),
        labels=_str_map(meta.get("labels")),
        annotations=annotations,
        phase=str(status.get("phase", "")),
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
        gpus=gpus,
        owner_kind=owner.get("kind") if owner else None,
        owner_name=owner.get("name") if owner else None,
        empty_dir=any("emptyDir" in v for v in spec.get("volumes") or []),
        mirror=MIRROR_ANNOTATION in annotations,
        waiting_reason=(waiting or {}).get("reason"),
        waiting_message=(waiting or {}).get("message"),
        images=tuple(images),
        affinity=spec.get("affinity") or None,
        claims=_claim_keys(namespace, spec, status) if spec.get("resourceClaims") else (),
        config_digest=config_digest(spec),
        created=parse_or_none(str(meta.get("creationTimestamp") or "")),
        gpu_requests=requests,
        node_selector=_str_map(spec.get("nodeSelector")),
        tolerations=tolerations(spec) if spec.get("tolerations") else (),
    )


def node_view(obj: Obj) -> NodeView:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    labels = _str_map(meta.get("labels"))
    invalid = None
    try:
        state = State.parse(labels.get(STATE_LABEL))
    except ValueError as exc:
        state, invalid = None, f"label {STATE_LABEL}: {exc}"
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    info = status.get("nodeInfo") or {}
    alloc, cap = status.get("allocatable") or {}, status.get("capacity") or {}
    return NodeView(
        name=str(meta.get("name", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=labels,
        annotations=_str_map(meta.get("annotations")),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        gpu_allocatable=None if alloc.get(GPU) is None else str(alloc.get(GPU)),
        gpu_capacity=None if cap.get(GPU) is None else str(cap.get(GPU)),
        kernel=str(info.get("kernelVersion", "")),
        os_image=str(info.get("osImage", "")),
        state=state,
        invalid=invalid,
        taints=taints(spec),
        allocatable=gpu_allocatable(status),
    )


def pdb_view(obj: Obj) -> PdbView | None:
    """None for a budget whose selector cannot be read (it then protects nothing we can see)."""
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    try:
        selector = from_label_selector_object(spec.get("selector"))
    except SelectorError:
        return None
    return PdbView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        selector=selector,
        disruptions_allowed=int(status.get("disruptionsAllowed", 0)),
        current_healthy=int(status.get("currentHealthy", 0)),
        desired_healthy=int(status.get("desiredHealthy", 0)),
        expected_pods=int(status.get("expectedPods", 0)),
    )


def driver_set(ds: Obj, revisions: Sequence[Obj]) -> DriverSet:
    """A driver DaemonSet with the newest of the ControllerRevisions it owns."""
    meta = _meta(ds)
    uid = meta.get("uid")
    owned = [r for r in revisions if any(o.get("uid") == uid for o in _meta(r).get("ownerReferences") or [])]
    newest = max(owned, key=lambda r: int(r.get("revision", 0)), default=None)
    template = (ds.get("spec") or {}).get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    version = next(
        (str(e.get("value")) for c in containers for e in c.get("env") or [] if e.get("name") == "DRIVER_VERSION"),
        None,
    )
    return DriverSet(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        node_selector=_str_map((template.get("spec") or {}).get("nodeSelector")),
        newest_hash=_str_map(_meta(newest).get("labels")).get(HASH_LABEL) if newest else None,
        newest_revision=int(newest.get("revision", 0)) if newest else 0,
        driver_version=version,
        image=str(containers[0].get("image")) if containers else None,
        config_digest=config_digest(template.get("spec")),
        images=tuple(str(c.get("image", "")) for c in containers),
        # Absent only from a hand-made object: the API server fills in its default, RollingUpdate.
        update_strategy=str(((ds.get("spec") or {}).get("updateStrategy") or {}).get("type") or "RollingUpdate"),
        owner=_controller(meta),
    )


def _controller(meta: Obj) -> tuple[str, str] | None:
    ref = next((r for r in meta.get("ownerReferences") or [] if isinstance(r, Mapping) and r.get("controller")), None)
    return (str(ref.get("kind", "")), str(ref.get("name", ""))) if ref else None
