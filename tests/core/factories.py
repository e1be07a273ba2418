"""Terse builders for the plain views the decision core reads, and small helpers to run one step.

Every timestamp is relative to `T0`; `at(s)` is the RFC 3339 form of `T0 + s`, as it sits on a node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import count
from typing import Any

from upgrader.core.model.actions import Action, Outcome, Result, Transition
from upgrader.core.model.selectors import parse_label_selector
from upgrader.core.model.states import STATE_LABEL, STATE_SINCE, State
from upgrader.core.model.timefmt import rfc3339
from upgrader.core.model.views import HASH_LABEL, Control, DriverSet, NodeView, PdbView, PodView, Snapshot
from upgrader.core.node.context import NodeContext, context
from upgrader.core.node.step import Step
from upgrader.core.node.steps import STEPS
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.core.rollout.stepping import Conclusion, conclude

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
OPERATOR_NS = "gpu-operator"
DRIVER_DS = "nvidia-driver-daemonset"
ZONE = "topology.kubernetes.io/zone"
OLD, NEW = "rev-old", "rev-new"
VERSION = "550.54.15"

_uids = count(1)


def at(seconds: float) -> str:
    """The annotation form of `T0 + seconds`."""
    return rfc3339(T0 + seconds)


def policy(**data: Any) -> Policy:
    """A policy from upgradePolicy keys, as a YAML file would give them."""
    return policy_from_mapping(data)


def node(
    name: str = "n1",
    state: State | None = State.UPGRADE_REQUIRED,
    *,
    zone: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    since: float | None = None,
    unschedulable: bool = False,
    ready: bool = True,
    gpus: str | None = "8",
    driver_version: str | None = None,
    invalid: str | None = None,
) -> NodeView:
    """A GPU node; `since` sets STATE_SINCE to `at(since)`; `driver_version` sets GFD's cuda.driver.*."""
    all_labels = {"nvidia.com/gpu.present": "true", **(labels or {})}
    if zone is not None:
        all_labels[ZONE] = zone
    if state is not None:
        all_labels[STATE_LABEL] = state.value
    if driver_version is not None:
        major, minor, rev = driver_version.split(".")
        all_labels.update(
            {
                "nvidia.com/cuda.driver.major": major,
                "nvidia.com/cuda.driver.minor": minor,
                "nvidia.com/cuda.driver.rev": rev,
            }
        )
    all_annotations = dict(annotations or {})
    if since is not None:
        all_annotations[STATE_SINCE] = at(since)
    return NodeView(
        name=name,
        resource_version="1",
        labels=all_labels,
        annotations=all_annotations,
        unschedulable=unschedulable,
        ready=ready,
        gpu_allocatable=gpus,
        gpu_capacity=gpus,
        kernel="5.15.0-69-generic",
        os_image="Ubuntu 22.04.2 LTS",
        state=state,
        invalid=invalid,
    )


def pod(
    name: str,
    node: str = "n1",
    *,
    namespace: str = "default",
    gpus: int = 0,
    owner: str | None = "ReplicaSet",
    owner_name: str | None = None,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    phase: str = "Running",
    terminating: bool = False,
    empty_dir: bool = False,
    mirror: bool = False,
    waiting_reason: str | None = None,
    waiting_message: str | None = None,
    uid: str | None = None,
    claims: tuple[str, ...] = (),
    digest: str | None = None,
    images: tuple[str, ...] = (),
    created: float | None = None,
) -> PodView:
    return PodView(
        namespace=namespace,
        name=name,
        uid=uid or f"uid-{name}-{next(_uids)}",
        node=node,
        labels=dict(labels or {}),
        annotations={},
        phase=phase,
        ready=ready,
        terminating=terminating,
        gpus=gpus,
        owner_kind=owner,
        owner_name=(owner_name or f"{name}-owner") if owner else None,
        empty_dir=empty_dir,
        mirror=mirror,
        waiting_reason=waiting_reason,
        waiting_message=waiting_message,
        claims=claims,
        config_digest=digest,
        images=images,
        created=created,
    )


def gpu_pod(name: str, node: str = "n1", **kw: Any) -> PodView:
    return pod(name, node, gpus=kw.pop("gpus", 1), **kw)


def driver_pod(
    node: str = "n1", revision: str | None = OLD, *, name: str | None = None, **kw: Any
) -> PodView:
    labels = {"app": DRIVER_DS}
    if revision is not None:
        labels[HASH_LABEL] = revision
    return pod(
        name or f"nvidia-driver-{node}-{revision}",
        node,
        namespace=OPERATOR_NS,
        owner="DaemonSet",
        owner_name=DRIVER_DS,
        labels=labels,
        **kw,
    )


def validator(node: str = "n1", *, ready: bool = True, **kw: Any) -> PodView:
    return pod(
        f"nvidia-operator-validator-{node}",
        node,
        namespace=OPERATOR_NS,
        owner="DaemonSet",
        owner_name="nvidia-operator-validator",
        labels={"app": "nvidia-operator-validator"},
        ready=ready,
        **kw,
    )


def pdb(
    name: str = "web",
    *,
    namespace: str = "default",
    selector: str = "app=web",
    allowed: int = 0,
    healthy: int = 2,
    desired: int = 2,
    expected: int = 2,
) -> PdbView:
    return PdbView(
        namespace=namespace,
        name=name,
        selector=parse_label_selector(selector),
        disruptions_allowed=allowed,
        current_healthy=healthy,
        desired_healthy=desired,
        expected_pods=expected,
    )


def driver_set(
    newest: str | None = NEW,
    *,
    revision: int = 2,
    version: str | None = VERSION,
    digest: str | None = None,
    images: tuple[str, ...] = (),
) -> DriverSet:
    return DriverSet(
        namespace=OPERATOR_NS,
        name=DRIVER_DS,
        node_selector={"nvidia.com/gpu.present": "true"},
        newest_hash=newest,
        newest_revision=revision,
        driver_version=version,
        image=f"nvcr.io/nvidia/driver:{version}",
        config_digest=digest,
        images=images,
    )


def snapshot(
    nodes: Iterable[NodeView],
    pods: Iterable[PodView] = (),
    *,
    pdbs: Sequence[PdbView] = (),
    driver_sets: Sequence[DriverSet] | None = None,
    control: Control | None = None,
    claims: Mapping[str, bool] | None = None,
) -> Snapshot:
    """Driver pods (owned by a driver DaemonSet) are listed both as driver pods and as node pods."""
    sets = [driver_set()] if driver_sets is None else list(driver_sets)
    names = {d.name for d in sets} | {DRIVER_DS}
    driver_pods: dict[str, list[PodView]] = {}
    node_pods: dict[str, list[PodView]] = {}
    node_list = list(nodes)
    for n in node_list:
        node_pods[n.name] = []
    for p in pods:
        node_pods.setdefault(p.node, []).append(p)
        if p.owner_kind == "DaemonSet" and p.owner_name in names and p.namespace == OPERATOR_NS:
            driver_pods.setdefault(p.node, []).append(p)
    return Snapshot(
        nodes={n.name: n for n in node_list},
        driver_pods=driver_pods,
        node_pods=node_pods,
        pdbs=list(pdbs),
        driver_sets=sets,
        control=control or Control(),
        gpu_claims={} if claims is None else claims,
    )


def step(snap: Snapshot, name: str = "n1", pol: Policy | None = None) -> tuple[NodeContext, Step]:
    """The step the node's state asks for, on this snapshot."""
    ctx = context(snap, name, pol or Policy())
    assert ctx.node.state is not None
    return ctx, STEPS[ctx.node.state](ctx)


def ok(plan: Step) -> list[Outcome]:
    """Every attempt succeeded."""
    return [Outcome(a, Result.OK) for a in plan.attempts]


def run_step(
    snap: Snapshot,
    name: str = "n1",
    pol: Policy | None = None,
    now: float = T0,
    outcomes: Sequence[Outcome] | None = None,
) -> tuple[Step, list[Action]]:
    """One step decided and concluded; attempts succeed unless `outcomes` says otherwise."""
    plan, concluded = conclude_step(snap, name, pol, now, outcomes)
    return plan, concluded.actions


def conclude_step(
    snap: Snapshot,
    name: str = "n1",
    pol: Policy | None = None,
    now: float = T0,
    outcomes: Sequence[Outcome] | None = None,
) -> tuple[Step, Conclusion]:
    """`run_step`, with the whole conclusion: its actions and what the node waits on."""
    ctx, plan = step(snap, name, pol)
    return plan, conclude(ctx, plan, ok(plan) if outcomes is None else outcomes, now)


def transition(actions: Sequence[Action]) -> Transition:
    """The one Transition among `actions`."""
    (found,) = [a for a in actions if isinstance(a, Transition)]
    return found
