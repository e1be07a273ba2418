"""Where a plan's facts come from: a kubectl List on disk, or the live cluster read with GET/LIST only."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from upgrader.commands import plan_coverage
from upgrader.commands.plan_items import item_problem, show
from upgrader.controller.settings import Settings
from upgrader.core.fleet.interlocks import CLUSTER_POLICY, NVIDIA_DRIVER, judge, operator_upgrade
from upgrader.core.fleet.managed import fleet
from upgrader.core.fleet.nvidia_drivers import DriverResource, driver_resource
from upgrader.core.model.gpupods import claim_index
from upgrader.core.model.input_errors import printable, yaml_where
from upgrader.core.model.placement import asks_for_gpus
from upgrader.core.model.selectors import SelectorError, parse_label_selector
from upgrader.core.model.views import Snapshot, driver_set, node_view, pdb_view, pod_view
from upgrader.core.plan.policy_fit import fleet_problem, refusal
from upgrader.core.policy.policy import Policy
from upgrader.inputs import FROM_FILE_MAX_MIB, MIB, ConfigError, read_bounded

if TYPE_CHECKING:
    from upgrader.kube.api import KubeApi

Obj = dict[str, Any]
ANNOTATION_PREFIX = "gpu-upgrader.io/"
KINDS = {
    "Node": "nodes",
    "Pod": "pods",
    "PodDisruptionBudget": "pdbs",
    "DaemonSet": "daemonsets",
    "ControllerRevision": "revisions",
    "NVIDIADriver": "nvidiadrivers",
    "ClusterPolicy": "clusterpolicies",
    "Job": "jobs",
    "ResourceClaim": "claims",
}


@dataclass
class PlanInput:
    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    pdbs: list[Obj] = field(default_factory=list)
    daemonsets: list[Obj] = field(default_factory=list)
    revisions: list[Obj] = field(default_factory=list)
    nvidiadrivers: list[Obj] = field(default_factory=list)
    clusterpolicies: list[Obj] = field(default_factory=list)
    jobs: list[Obj] = field(default_factory=list)
    claims: list[Obj] | None = field(default_factory=list)  # None: the cluster would not list them
    file: str | None = None  # where it was read from; None: the live cluster
    kinds: set[str] = field(default_factory=set)  # the kinds read: a file's with items, the cluster's listed


# kubectl never nests that deep; Python's JSON decoder and libyaml stop at about 1,000 levels.
TOO_DEEP = "nested too deeply (lists or maps about 1,000 levels deep; kubectl never writes that)"


def _parse(path: Path, limit: int) -> Any:
    what = f"--from-file {path}"
    raw = read_bounded(path, what, limit, "UPGRADER_FROM_FILE_MAX_MIB raises it")
    text_start = raw.lstrip()[:1]
    try:
        if text_start in (b"{", b"["):
            try:
                return json.loads(raw)
            except json.JSONDecodeError as exc:
                where = f"line {exc.lineno} column {exc.colno}"
                raise ConfigError(f"{what}: not valid JSON at {where} ({exc.msg}); is the file truncated?") from None
            except UnicodeDecodeError:
                raise ConfigError(f"{what}: not UTF-8 text") from None
        try:
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            return yaml.load(raw, Loader=loader)
        except yaml.YAMLError as exc:
            if "nesting depth" in str(getattr(exc, "problem", "")):  # libyaml's own bound
                raise ConfigError(f"{what}: {TOO_DEEP}") from None
            where = yaml_where(exc)
            raise ConfigError(f"{what}: not valid JSON or YAML{where}; is the file truncated?") from None
    except RecursionError:
        raise ConfigError(f"{what}: {TOO_DEEP}") from None


def from_file(name: str, limit: int = FROM_FILE_MAX_MIB * MIB) -> PlanInput:
    """A kubectl List (`kubectl get nodes,pods,pdb,daemonsets,controllerrevisions,jobs,nvidiadrivers
    -A -o json`, plus `resourceclaims` where the cluster serves DRA: a pod's claim missing from the
    file counts as a GPU claim) of at most `limit` bytes."""
    path = Path(name)
    if path.is_dir():
        raise ConfigError(f"--from-file {name}: is a directory, expected a kubectl List file")
    if not path.is_file():
        raise ConfigError(f"--from-file {name}: no such file")
    data = _parse(path, limit)
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise ConfigError(
            f"--from-file {name}: expected a kubectl List with an `items` array (kubectl get ... -o json)"
        )
    out = PlanInput()
    for index, item in enumerate(data["items"]):
        try:
            problem = item_problem(item)
        except RecursionError:  # the repr of a deep value it names
            problem = TOO_DEEP
        if problem is not None:
            raise ConfigError(f"--from-file {name}: item {index} {problem}")
        bucket = KINDS.get(item["kind"])
        if bucket is not None:
            getattr(out, bucket).append(item)
            out.kinds.add(item["kind"])
    if not out.nodes:
        raise ConfigError(f"--from-file {name}: no Node objects in it (include nodes in the kubectl get)")
    plan_coverage.check_file(name, out.kinds, out.pods)
    plan_coverage.say_notes(plan_coverage.file_notes(name, out.kinds, out.daemonsets))
    out.file = name
    return out


# The JSON type of every field a plan reads from an object, by kind: a dict is a map whose listed
# keys are checked when present, a one-element list is a list whose every element is checked, a
# string names a type. It is walked only after reading a file failed, to name the field: on a good
# file (a plan may read 150,000 pods) it costs nothing.
_LABELS = "map of strings"
_OWNERS = [{"kind": "string", "name": "string", "uid": "string", "controller": "boolean"}]
_CONDITIONS = [{"type": "string", "status": "string"}]
_CONTAINERS = [
    {"image": "string", "resources": {"limits": {}, "requests": {}}, "env": [{"name": "string", "value": "string"}]}
]
_CLAIM_REFS = [{"name": "string", "resourceClaimName": "string"}]
SHAPES: dict[str, dict[str, Any]] = {
    "Node": {
        "spec": {"unschedulable": "boolean", "taints": [{"key": "string", "value": "string", "effect": "string"}]},
        "status": {
            "conditions": _CONDITIONS,
            "nodeInfo": {"kernelVersion": "string", "osImage": "string"},
            "allocatable": {},
            "capacity": {},
        },
    },
    "Pod": {
        "metadata": {"ownerReferences": _OWNERS},
        "spec": {
            "nodeName": "string",
            "containers": _CONTAINERS,
            "initContainers": _CONTAINERS,
            "resourceClaims": _CLAIM_REFS,
            "volumes": [{}],
            "affinity": {},
            "nodeSelector": _LABELS,
            "tolerations": [{"key": "string", "operator": "string", "value": "string", "effect": "string"}],
        },
        "status": {
            "phase": "string",
            "resourceClaimStatuses": _CLAIM_REFS,
            "conditions": _CONDITIONS,
            "containerStatuses": [{"state": {"waiting": {"reason": "string", "message": "string"}}}],
        },
    },
    "PodDisruptionBudget": {
        "spec": {"selector": {"matchLabels": _LABELS, "matchExpressions": [{}]}},
        "status": {k: "integer" for k in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")},
    },
    "DaemonSet": {
        "metadata": {"uid": "string"},
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": _LABELS,
                    "containers": [{"image": "string", "env": [{"name": "string", "value": "string"}]}],
                }
            }
        },
    },
    "ControllerRevision": {"metadata": {"ownerReferences": _OWNERS}, "revision": "integer"},
    "NVIDIADriver": {"spec": {"default": "boolean", "nodeSelector": _LABELS}},
    "ResourceClaim": {"status": {"allocation": {"devices": {"results": [{"driver": "string"}]}}}},
}
_TYPES: dict[str, type] = {"string": str, "integer": int, "boolean": bool}


def _wrong(value: Any, shape: Any) -> list[Any] | None:
    """None, or [what is wrong, innermost key or index, ..., outermost key]."""
    if isinstance(shape, dict) or shape == _LABELS:
        if not isinstance(value, dict):
            return [f"that is {type(value).__name__}, expected a map"]
        if shape == _LABELS:
            bad = next((k for k, v in value.items() if not isinstance(k, str) or not isinstance(v, str)), None)
            return None if bad is None else [f"entry {bad!r} that is not a string label ({show(value[bad])})"]
        for key, inner in shape.items():
            if value.get(key) is not None and (found := _wrong(value[key], inner)) is not None:
                return [*found, key]
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return [f"that is {type(value).__name__}, expected a list"]
        for index, element in enumerate(value):
            if (found := _wrong(element, shape[0])) is not None:
                return [*found, index]
        return None
    wanted = _TYPES[shape]
    if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
        return [f"that is {show(value)}, expected {'an' if shape == 'integer' else 'a'} {shape}"]
    return None


def shape_problem(name: str, limit: int = FROM_FILE_MAX_MIB * MIB) -> str | None:
    """After a plan could not read `--from-file name`: the first field whose JSON type is wrong, as
    the one line to show (None if every field a plan reads has its type: then it is not the file)."""
    data = _parse(Path(name), limit)
    for index, item in enumerate(data["items"]):
        found = _wrong(item, SHAPES.get(item["kind"], {}))
        if found is not None:
            problem, *where = found
            path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in reversed(where))
            meta = item["metadata"]
            who = "/".join(printable(str(meta[k])) for k in ("namespace", "name") if meta.get(k))
            return f"--from-file {name}: item {index} ({printable(item['kind'])} {who}) has {path[1:]} {problem}"
    return None


def from_cluster(api: KubeApi, settings: Settings) -> PlanInput:
    """Read everything a plan needs with GET/LIST requests only."""
    from upgrader.kube.api import ApiError
    from upgrader.kube.snapshot import CLAIMS_PATH

    ns = settings.driver_namespace
    out = PlanInput(
        nodes=api.list("/api/v1/nodes").get("items", []),
        pods=api.list("/api/v1/pods").get("items", []),
        pdbs=api.list("/apis/policy/v1/poddisruptionbudgets").get("items", []),
        daemonsets=api.list(f"/apis/apps/v1/namespaces/{ns}/daemonsets").get("items", []),
        revisions=api.list(f"/apis/apps/v1/namespaces/{ns}/controllerrevisions").get("items", []),
        kinds={"Node", "Pod", "PodDisruptionBudget", "DaemonSet", "ControllerRevision"},  # or it raised
    )
    try:
        out.nvidiadrivers = api.list("/apis/nvidia.com/v1alpha1/nvidiadrivers").get("items", [])
        out.kinds.add("NVIDIADriver")
    except ApiError as exc:
        if exc.status != 404:  # no NVIDIADriver CRD installed: nothing to check
            raise
    try:
        out.clusterpolicies = api.list("/apis/nvidia.com/v1/clusterpolicies").get("items", [])
        out.kinds.add("ClusterPolicy")
    except ApiError as exc:
        if exc.status != 404:  # no GPU Operator ClusterPolicy CRD: no upgrade controller of its own
            raise
    try:
        out.claims = api.list(CLAIMS_PATH).get("items", [])
        out.kinds.add("ResourceClaim")
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        out.claims = None  # no DRA here, or not ours to read: every claim counts as a GPU claim
    return out


class RelevantPods:
    """A cheap test on raw pod JSON: does the plan need this pod at all?

    A plan looks at driver pods, pods holding GPUs or ResourceClaims (evicted), pods that declare CUDA needs or a node
    affinity, pods the upgrade waits for and, with drain enabled, pods a drain evicts. Skipping the
    rest before building views keeps a 150,000-pod plan close to the cost of parsing the file.
    It keeps the policy it was made from: `to_snapshot` checks that policy's failure domains against the fleet.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        wait = policy.wait_for_completion.pod_selector
        self.wait = parse_label_selector(wait) if wait else None
        self.drain = parse_label_selector(policy.drain.pod_selector) if policy.drain.enable else None

    def __call__(self, raw: Obj) -> bool:
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        if self.drain is not None and self.drain.matches(meta.get("labels")):
            return True
        if self.wait is not None and self.wait.matches(meta.get("labels")):
            return True
        if spec.get("affinity") or spec.get("resourceClaims"):
            return True
        annotations = meta.get("annotations")
        if annotations and any(str(k).startswith(ANNOTATION_PREFIX) for k in annotations):
            return True
        for ref in meta.get("ownerReferences") or ():
            if ref.get("kind") == "DaemonSet":
                return True
        containers = spec.get("containers")
        if containers and any(map(asks_for_gpus, containers)):
            return True
        inits = spec.get("initContainers")
        return any(map(asks_for_gpus, inits)) if inits else False


def relevant_pods(policy: Policy) -> RelevantPods:
    return RelevantPods(policy)


def to_snapshot(
    data: PlanInput, settings: Settings, keep: RelevantPods | None = None, policy_path: str | None = None
) -> tuple[Snapshot, list[DriverResource]]:
    """The plan's snapshot; ConfigError when the input cannot tell what a plan must (`plan_coverage`), or
    when the policy `keep` was made from names a failure domain no managed node is in (core/plan/policy_fit.py)."""
    try:
        ds_selector = parse_label_selector(settings.driver_daemonset_selector)
    except SelectorError as exc:
        raise ConfigError(f"UPGRADER_DRIVER_DAEMONSET_SELECTOR: {exc}") from None
    driver_ds = [d for d in data.daemonsets if ds_selector.matches((d.get("metadata") or {}).get("labels"))]
    driver_names = {((d["metadata"].get("namespace") or ""), d["metadata"]["name"]) for d in driver_ds}
    nodes = {n["metadata"]["name"]: node_view(n) for n in data.nodes}
    node_pods: dict[str, list] = {}
    driver_pods: dict[str, list] = {}
    for raw in data.pods:
        node = str((raw.get("spec") or {}).get("nodeName") or "")
        if node not in nodes or (keep is not None and not keep(raw)):
            continue
        pod = pod_view(raw)
        node_pods.setdefault(node, []).append(pod)
        if pod.owner_kind == "DaemonSet" and (pod.namespace, pod.owner_name) in driver_names:
            driver_pods.setdefault(node, []).append(pod)
    pdbs = [v for p in data.pdbs if (v := pdb_view(p)) is not None]
    sets = [driver_set(d, data.revisions) for d in driver_ds]
    upgrades = [operator_upgrade(CLUSTER_POLICY, o) for o in data.clusterpolicies]
    upgrades += [operator_upgrade(NVIDIA_DRIVER, o) for o in data.nvidiadrivers]
    snapshot = Snapshot(
        nodes=nodes,
        driver_pods=driver_pods,
        node_pods=node_pods,
        pdbs=pdbs,
        driver_sets=sets,
        gpu_claims=None if data.claims is None else claim_index(data.claims),
        interlocks=judge(upgrades, sets),
    )
    plan_coverage.check_coverage(data.file, data.kinds, driver_ds, snapshot, settings)
    if keep is not None and (problem := fleet_problem(keep.policy, fleet(snapshot).managed, snapshot)) is not None:
        raise ConfigError(refusal(problem, policy_path))
    return snapshot, [_driver_resource(r) for r in data.nvidiadrivers]


class MalformedObject(ValueError):
    """An object the plan cannot read, named with the field that is wrong."""


def _driver_resource(raw: Obj) -> DriverResource:
    """A live NVIDIADriver the CRD's schema let through malformed (an old CRD, or none) stops the
    plan with the field named; for a file, the caller names the item of the file instead."""
    try:
        return driver_resource(raw)
    except ValueError as exc:
        raise MalformedObject(f"cannot check driver selectors: {exc}") from None
