"""The plan's per-node findings: what would block or slow the upgrade of one node, and why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from upgrader.core.compat.cuda import Floors, affinity_verdict, workload_verdict
from upgrader.core.compat.images import kernel_of, os_tag
from upgrader.core.compat.profiles import Profile, qualification
from upgrader.core.model.findings import BLOCKING, WARNING, Finding
from upgrader.core.model.selectors import parse_label_selector
from upgrader.core.model.views import NodeView, PdbView, PodView
from upgrader.core.policy.policy import Policy

Workload = tuple[str, tuple[tuple[str, str], ...]]  # (namespace, labels): pods one PDB sees alike


def pdb_findings(
    node: str,
    pods: list[PodView],
    pdbs: Mapping[str, list[PdbView]],
    covering: dict[Workload, list[PdbView]],
) -> list[Finding]:
    per_budget: dict[str, tuple[PdbView, list[PodView]]] = {}
    for pod in pods:
        workload = (pod.namespace, tuple(sorted(pod.labels.items())))
        if workload not in covering:  # pods of one workload share labels: match their selectors once
            covering[workload] = [pdb for pdb in pdbs.get(pod.namespace, ()) if pdb.covers(pod)]
        for pdb in covering[workload]:
            per_budget.setdefault(pdb.key, (pdb, []))[1].append(pod)
    out = []
    for key, (pdb, covered) in sorted(per_budget.items()):
        if len(covered) > pdb.disruptions_allowed:
            names = ", ".join(sorted(p.key for p in covered))
            out.append(
                Finding(
                    "pdb-blocks-eviction",
                    BLOCKING,
                    node,
                    f"evicting {names} needs {len(covered)} disruption(s) of PodDisruptionBudget {key}, "
                    f"which allows {pdb.disruptions_allowed} (currentHealthy {pdb.current_healthy}, "
                    f"desiredHealthy {pdb.desired_healthy}): the rollout would halt at "
                    "pod-deletion-required on this node",
                )
            )
    return out


def driver_pdb_findings(node: str, driver_pods: Sequence[PodView], pdbs: Mapping[str, list[PdbView]]) -> list[Finding]:
    """A PodDisruptionBudget over the driver pods: the restart deletes them anyway, as the GPU Operator
    does (a budget over a DaemonSet's pods cannot make room for a new one), so it is said, not asked."""
    out = []
    for pod in driver_pods:
        for pdb in pdbs.get(pod.namespace, ()):
            if pdb.covers(pod):
                out.append(
                    Finding(
                        "pdb-selects-driver-pod",
                        WARNING,
                        node,
                        f"PodDisruptionBudget {pdb.key} selects driver pod {pod.key}: the driver restart deletes it "
                        "anyway, as the GPU Operator does (the budget is not asked); the status names it then",
                    )
                )
    return out


def _refusal(pod: PodView, force: bool, delete_empty_dir: bool, knob: str) -> str | None:
    """Why the policy forbids evicting `pod` under `knob` (gpuPodDeletion or drain), or None."""
    if pod.owner_kind is None and not force:
        return f"{pod.key} is not managed by a controller: set {knob}.force to delete it"
    if pod.empty_dir and not delete_empty_dir:
        return f"{pod.key} uses emptyDir: set {knob}.deleteEmptyDir to delete it"
    return None


def undeletable(gpu_pods: Sequence[PodView], policy: Policy) -> list[PodView]:
    """GPU pods GPU pod deletion may not evict under the policy."""
    deletion = policy.gpu_pod_deletion
    return [p for p in gpu_pods if _refusal(p, deletion.force, deletion.delete_empty_dir, "gpuPodDeletion")]


def eligibility_findings(
    node: str, gpu_pods: list[PodView], drain_pods: list[PodView], policy: Policy
) -> list[Finding]:
    """GPU pods deletion may not evict block, unless the drain (drain.enable) may: then the node
    falls back to a drain. Under drainEveryNode, every pod the drain may not evict blocks too."""
    out = []
    deletion, drain = policy.gpu_pod_deletion, policy.drain
    for pod in gpu_pods:
        why = _refusal(pod, deletion.force, deletion.delete_empty_dir, "gpuPodDeletion")
        if why is None:
            continue
        drain_why = _refusal(pod, drain.force, drain.delete_empty_dir, "drain")
        if pod in drain_pods and drain_why is None:
            out.append(Finding("pod-deletion-blocked", WARNING, node, f"{why}; the node falls back to a drain"))
        else:
            more = f"; nor will the drain: {drain_why}" if drain.enable and pod in drain_pods else ""
            out.append(Finding("pod-deletion-blocked", BLOCKING, node, why + more))
    if policy.drain_every_node or undeletable(gpu_pods, policy):
        for pod in drain_pods:
            drain_why = _refusal(pod, drain.force, drain.delete_empty_dir, "drain")
            if drain_why is not None and pod not in gpu_pods:
                out.append(Finding("pod-deletion-blocked", BLOCKING, node, drain_why))
    return out


def budget_findings(policy: Policy, never: Sequence[str]) -> list[Finding]:
    """maxUnavailable 0 is the GPU Operator's "only nodes already unavailable progress": say so, with
    the nodes (`never`: those that need the new driver and get no wave) it leaves behind."""
    if policy.max_unavailable_nodes(100) != 0 or not never:
        return []
    names = ", ".join(sorted(never)[:5]) + (f" and {len(never) - 5} more" if len(never) > 5 else "")
    return [
        Finding(
            "max-unavailable-zero",
            WARNING,
            None,
            f"maxUnavailable {policy.max_unavailable}: only nodes already unavailable (cordoned or NotReady) "
            f"start; {len(never)} node(s) that need the new driver never will: {names}",
        )
    ]


def job_findings(node: str, pods: list[PodView], policy: Policy) -> list[Finding]:
    text = policy.wait_for_completion.pod_selector
    if not text:
        return []
    selector = parse_label_selector(text)
    running = sorted(p.key for p in pods if not p.terminal and selector.matches(p.labels))
    if not running:
        return []
    limit = policy.wait_for_completion.timeout_seconds
    until = f"up to {limit}s, then the rollout halts" if limit else "with no timeout"
    return [
        Finding(
            "wait-for-jobs",
            WARNING,
            node,
            f"{', '.join(running)} match waitForCompletion.podSelector {text}: the upgrade waits for them {until}",
        )
    ]


def cuda_findings(
    node: NodeView, pods: list[PodView], driver: str, floors: Floors
) -> list[Finding]:
    out = []
    for pod in pods:
        if pod.terminal:
            continue
        for verdict in (
            workload_verdict(pod.annotations, node.labels, driver, floors),
            affinity_verdict(pod.affinity, driver),
        ):
            if verdict is not None and not verdict.admitted:
                out.append(
                    Finding(
                        "cuda-incompatible",
                        BLOCKING,
                        node.name,
                        f"{pod.key} would not run on driver {driver}: {verdict.reason}",
                    )
                )
    return out


def profile_findings(node: NodeView, driver: str, profiles: Sequence[Profile], now: float) -> list[Finding]:
    product = node.labels.get("nvidia.com/gpu.product", "")
    try:
        kernel, os = kernel_of(node), os_tag(node)
    except ValueError:
        return []  # already reported as invalid-node-data
    today = datetime.fromtimestamp(now, tz=UTC).date()
    covering, reason = qualification(profiles, node.labels, product, driver, kernel, os, today)
    if covering is not None:
        return []
    return [
        Finding(
            "unqualified-profile",
            BLOCKING,
            node.name,
            f"({product}, driver {driver}, kernel {kernel}, {os}) is not covered by a qualified, unexpired "
            f"profile: {reason}",
        )
    ]
