"""Where kube-scheduler (v1.32, default profile) would let a pod run, and what it says when nowhere.

Pure functions on API JSON. The filters run in kube-scheduler's order, the first that rejects a node
naming it: NodeUnschedulable, TaintToleration, NodeAffinity (with its PreFilter on
`matchFields metadata.name In`), NodeResourcesFit for `nvidia.com/gpu` and `nvidia.com/mig-*`.
A node that is not Ready carries the NoSchedule taint the node lifecycle controller gives it.
When no node fits, `place` words the PodScheduled message as `FitError.Error()` does, including the
DefaultPreemption PostFilter's part (the emulator never preempts; see docs/emulator.md).

Written apart from `upgrader.core.model.placement`/`capacity` on purpose: the emulator is the reference
those are tested against, so it must not share their code (or their mistakes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from upgrader.core.model.selectors import node_selector_matches

Obj = dict[str, Any]

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")  # PreferNoSchedule only scores
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
NODE_NAME_FIELD = "metadata.name"

# The plugins' reasons, worded as kube-scheduler v1.32 words them.
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
PREFILTERED = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
TERMS_CONFLICT = "pod affinity terms conflict"
NO_NODES = "no nodes available to schedule pods"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NEVER_PREEMPTS = "not eligible due to preemptionPolicy=Never."


def untolerated_taint_reason(taint: Obj) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key') or ''}: {taint.get('value') or ''}}}"


def insufficient_reason(resource: str) -> str:
    return f"Insufficient {resource}"


# ----- taints -------------------------------------------------------------------------------


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """`Toleration.ToleratesTaint`: an empty effect or key matches any; operator defaults to Equal."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def tolerated(tolerations: Iterable[Obj], taint: Obj) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def ready_status(node: Obj) -> str:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status") or "Unknown")
    return "Unknown"


def node_taints(node: Obj) -> list[Obj]:
    """`spec.taints`, plus the NoSchedule taint the node lifecycle controller appends to a node that is
    not Ready (not-ready when False, unreachable when Unknown): the scheduler sees readiness only so."""
    taints = list((node.get("spec") or {}).get("taints") or [])
    ready = ready_status(node)
    if ready != "True":
        key = NOT_READY if ready == "False" else UNREACHABLE
        if not any(t.get("key") == key and t.get("effect") == "NoSchedule" for t in taints):
            taints.append({"key": key, "effect": "NoSchedule"})
    return taints


def untolerated(node: Obj, tolerations: list[Obj]) -> Obj | None:
    """The first NoSchedule/NoExecute taint in the node's order that no toleration tolerates."""
    for taint in node_taints(node):
        if taint.get("effect") in BLOCKING_EFFECTS and not tolerated(tolerations, taint):
            return taint
    return None


def intolerable_preferences(node: Obj, tolerations: list[Obj]) -> int:
    """kube-scheduler's TaintToleration score counts a node's PreferNoSchedule taints the pod does not
    tolerate (tolerations with an empty effect or PreferNoSchedule only); fewer scores higher. With
    its default weight 3 against at most 2 x 100 from the resource scores, a node with fewer such
    taints always wins among feasible ones, so the count ranks first here."""
    mine = [t for t in tolerations if (t.get("effect") or "") in ("", "PreferNoSchedule")]
    return sum(1 for taint in (node.get("spec") or {}).get("taints") or []
               if taint.get("effect") == "PreferNoSchedule" and not tolerated(mine, taint))


# ----- node affinity ------------------------------------------------------------------------


def _as_int(text: Any) -> int | None:
    try:
        return int(str(text), 10)
    except ValueError:
        return None


def _label_matches(expr: Obj, labels: Mapping[str, str]) -> bool | None:
    """One matchExpressions requirement; None when it is malformed (its term then matches nothing)."""
    key, op, values = expr.get("key") or "", expr.get("operator"), [str(v) for v in expr.get("values") or []]
    has = key in labels
    if op in ("In", "NotIn"):
        if not values:
            return None
        inside = has and labels[key] in values
        return inside if op == "In" else not inside
    if op in ("Exists", "DoesNotExist"):
        if values:
            return None
        return has if op == "Exists" else not has
    if op in ("Gt", "Lt"):
        bound = _as_int(values[0]) if len(values) == 1 else None
        if bound is None:
            return None
        value = _as_int(labels[key]) if has else None  # a label that is not an integer never matches
        if value is None:
            return False
        return value > bound if op == "Gt" else value < bound
    return None


def _field_matches(expr: Obj, node_name: str) -> bool | None:
    """One matchFields requirement: In or NotIn with exactly one value; only metadata.name is set."""
    values = [str(v) for v in expr.get("values") or []]
    if len(values) != 1 or expr.get("operator") not in ("In", "NotIn"):
        return None
    actual = node_name if expr.get("key") == NODE_NAME_FIELD else ""
    return (actual == values[0]) == (expr.get("operator") == "In")


def _term_matches(term: Obj, labels: Mapping[str, str], node_name: str) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term selects nothing
    results = [_label_matches(e, labels) for e in exprs] + [_field_matches(f, node_name) for f in fields]
    return all(r is True for r in results)


def required_terms(pod: Obj) -> list[Obj] | None:
    """The required nodeSelectorTerms, or None when the pod has no required node affinity."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    return list(required.get("nodeSelectorTerms") or [])


def affinity_matches(pod: Obj, node: Obj) -> bool:
    """nodeSelector and the required node affinity together (terms ORed, requirements ANDed)."""
    labels = node["metadata"].get("labels") or {}
    if not node_selector_matches((pod.get("spec") or {}).get("nodeSelector"), labels):
        return False
    terms = required_terms(pod)
    if terms is None:
        return True
    return any(_term_matches(t, labels, node["metadata"]["name"]) for t in terms)


def prefilter_names(pod: Obj) -> set[str] | None:
    """NodeAffinity's PreFilter: when every term pins `metadata.name In [...]`, only those nodes are
    looked at (the others are 'didn't satisfy plugin(s) [NodeAffinity]'); None means all nodes."""
    terms = required_terms(pod)
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        pinned: set[str] | None = None
        for expr in term.get("matchFields") or []:
            if expr.get("key") == NODE_NAME_FIELD and expr.get("operator") == "In":
                values = {str(v) for v in expr.get("values") or []}
                pinned = values if pinned is None else pinned & values
        if pinned is None:
            return None  # this term can match any node, and terms are ORed
        names |= pinned
    return names


# ----- resources ----------------------------------------------------------------------------


def allocatable(node: Obj, resource: str) -> int:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource, "0")
    return _as_int(value) or 0


def short_of(node: Obj, requests: Mapping[str, int], used: Mapping[str, int]) -> list[str]:
    """The requested resources the node's allocatable, less what its pods hold, cannot cover."""
    return sorted(
        r for r, amount in requests.items() if amount > 0 and amount > allocatable(node, r) - used.get(r, 0)
    )


# ----- one scheduling attempt ---------------------------------------------------------------


@dataclass(frozen=True)
class NodeLoad:
    """What a node's pods (not Succeeded/Failed) hold, and the lowest priority among them."""

    used: Mapping[str, int]
    lowest_priority: int | None


@dataclass(frozen=True)
class Placement:
    feasible: list[str]  # nodes passing every filter, in the order given
    message: str  # kube-scheduler's message when `feasible` is empty, else ""


def priority(pod: Obj) -> int:
    return _as_int((pod.get("spec") or {}).get("priority") or 0) or 0


def place(
    pod: Obj,
    nodes: list[Obj],
    requests: Mapping[str, int],
    load: Callable[[str], NodeLoad],
    lower_load: Callable[[str, int], Mapping[str, int]],
) -> Placement:
    """Filter `nodes` for `pod`. `load(node)` is what the node's pods hold; `lower_load(node, p)` what
    its pods of priority below p hold (asked only for preemption's dry run)."""
    if not nodes:
        return Placement([], NO_NODES)
    total = len(nodes)
    names = prefilter_names(pod)
    if names is not None and not names:
        return Placement([], _fit_error(total, Counter(), TERMS_CONFLICT, _preemption(pod, total, Counter())))
    tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
    feasible: list[str] = []
    reasons: Counter[str] = Counter()
    resolvable: list[tuple[Obj, list[str]]] = []  # rejected for resources only: preemption might help
    for node in nodes:
        name = node["metadata"]["name"]
        if names is not None and name not in names:
            reasons[PREFILTERED] += 1
        elif (node.get("spec") or {}).get("unschedulable") and not tolerated(tolerations, UNSCHEDULABLE_TAINT):
            reasons[UNSCHEDULABLE] += 1
        elif (taint := untolerated(node, tolerations)) is not None:
            reasons[untolerated_taint_reason(taint)] += 1
        elif not affinity_matches(pod, node):
            reasons[AFFINITY] += 1
        elif short := short_of(node, requests, load(name).used):
            reasons.update(insufficient_reason(r) for r in short)  # each resource counts
            resolvable.append((node, short))
        else:
            feasible.append(name)
    if feasible:
        return Placement(feasible, "")
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":  # checked before any dry run
        return Placement([], _fit_error(total, reasons, "", _preemption(pod, total, Counter())))
    dry_run = _dry_run(pod, requests, resolvable, load, lower_load)
    if dry_run is None:  # preemption would find victims; the emulator does not evict them
        return Placement([], _fit_error(total, reasons, "", ""))
    if total > len(resolvable):
        dry_run[NOT_HELPFUL] += total - len(resolvable)
    return Placement([], _fit_error(total, reasons, "", _preemption(pod, total, dry_run)))


def _dry_run(
    pod: Obj,
    requests: Mapping[str, int],
    resolvable: list[tuple[Obj, list[str]]],
    load: Callable[[str], NodeLoad],
    lower_load: Callable[[str, int], Mapping[str, int]],
) -> Counter[str] | None:
    """DefaultPreemption's per-node verdicts on the nodes only resources ruled out; None when removing
    lower-priority pods would make room on one of them."""
    mine = priority(pod)
    verdicts: Counter[str] = Counter()
    for node, _ in resolvable:
        name = node["metadata"]["name"]
        lowest = load(name).lowest_priority
        if lowest is None or lowest >= mine:
            verdicts[NO_VICTIMS] += 1
            continue
        held, lower = load(name).used, lower_load(name, mine)
        left = {r: held.get(r, 0) - lower.get(r, 0) for r in held}
        short = short_of(node, requests, left)
        if not short:
            return None
        verdicts.update(insufficient_reason(r) for r in short)
    return verdicts


def _preemption(pod: Obj, total: int, verdicts: Counter[str]) -> str:
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return f"preemption: {NEVER_PREEMPTS}"
    if not verdicts:
        verdicts = Counter({NOT_HELPFUL: total})
    return f"preemption: {_fit_error(total, verdicts, '', '')}"


def _fit_error(total: int, reasons: Counter[str], prefilter: str, postfilter: str) -> str:
    """`FitError.Error()`: a PreFilter message replaces the per-node histogram, whose entries are
    "<count> <reason>" sorted as strings (so "10 ..." sorts before "2 ...")."""
    message = f"0/{total} nodes are available:"
    if prefilter:
        message += f" {prefilter}."
    elif reasons:
        message += " " + ", ".join(sorted(f"{n} {r}" for r, n in reasons.items())) + "."
    if postfilter:
        message += f" {postfilter}"
    return message
