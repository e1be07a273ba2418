"""What the steps read off a node and its pods, and how they name pods in what a user reads: which
pods a drain evicts, which came back after the cordon, what validation still misses, the driver version.
"""

from __future__ import annotations

from collections.abc import Sequence

from upgrader.core.model.selectors import LabelSelector, parse_label_selector
from upgrader.core.model.states import DRAIN_SKIP_LABEL, GPU_BEFORE, STATE_SINCE
from upgrader.core.model.timefmt import parse_or_none
from upgrader.core.model.views import NodeView, PdbView, PodView
from upgrader.core.node.context import NodeContext


def pod_names(pods: list[PodView], limit: int = 5) -> str:
    keys = [p.key for p in sorted(pods, key=lambda p: p.key)]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def pod_sources(pods: list[PodView]) -> str:
    """Pods by what owns them (`pods of Job batch/eval`), each unowned pod by its own name."""
    owned = sorted({f"{p.owner_kind} {p.namespace}/{p.owner_name}" for p in pods if p.owner_kind and p.owner_name})
    loose = [p for p in pods if not (p.owner_kind and p.owner_name)]
    parts = [f"pods of {', '.join(owned)}"] if owned else []
    return ", ".join(parts + ([pod_names(loose)] if loose else []))


def count_of(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def came_back(ctx: NodeContext, pods: list[PodView]) -> list[PodView]:
    """Pods created on the node after it entered its state: the node was cordoned by then, so
    they were put on it directly, and an eviction is followed by another such pod."""
    entered = parse_or_none(ctx.node.annotations.get(STATE_SINCE))
    return [p for p in pods if entered is not None and p.created is not None and p.created > entered]


def drained(pod: PodView, selector: LabelSelector) -> bool:
    """A pod a drain evicts: selected, not a DaemonSet's or a mirror pod, not labelled to be skipped."""
    return (
        not pod.terminal
        and not pod.mirror
        and pod.owner_kind != "DaemonSet"
        and pod.labels.get(DRAIN_SKIP_LABEL) != "true"
        and selector.matches(pod.labels)
    )


def validation_problems(ctx: NodeContext) -> list[str]:
    """Everything that says the new driver is not (yet) loaded and usable on the node."""
    problems = []
    target = ctx.target_hash
    live = [p for p in ctx.driver_pods if not p.terminating]
    if not any(p.ready and (target is None or p.revision_hash == target) for p in live):
        problems.append("driver pod not Ready at the new revision")
    selector_text = ctx.policy.validation.pod_selector
    if selector_text:
        selector = parse_label_selector(selector_text)
        validators = [p for p in ctx.pods if selector.matches(p.labels) and not p.terminating]
        if not validators:
            problems.append(f"no validator pod ({selector_text}) on the node")
        not_ready = [p for p in validators if not p.ready]
        if not_ready:
            problems.append(f"validator pod {pod_names(not_ready)} not Ready")
    before = ctx.node.annotations.get(GPU_BEFORE)
    if before and before != "0" and ctx.node.gpu_allocatable != before:
        problems.append(f"nvidia.com/gpu allocatable {ctx.node.gpu_allocatable or 'missing'}, expected {before}")
    version = ctx.driver_set.driver_version if ctx.driver_set else None
    running = driver_version_label(ctx.node)
    if version and running and running != version:
        problems.append(f"node reports driver {running}, expected {version} (module not reloaded)")
    return problems


def driver_version_label(node: NodeView) -> str | None:
    """The running driver version GPU Feature Discovery publishes, or None."""
    parts = [node.labels.get(f"nvidia.com/cuda.driver.{p}") for p in ("major", "minor", "rev")]
    return ".".join(p for p in parts if p) if all(parts) else None


def budgets_over(pods: Sequence[PodView], pdbs: Sequence[PdbView]) -> str:
    """The PodDisruptionBudgets that select driver pods a restart deletes: said, not asked (a delete,
    as the GPU Operator's restart is; docs/policy.md#preflight)."""
    named = sorted({b.key for p in pods for b in pdbs if b.covers(p)})
    if not named:
        return ""
    return f" (deleted although PodDisruptionBudget {', '.join(named)} selects it: a driver restart does not evict)"
