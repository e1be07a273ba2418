"""PDB-aware choice of the next nodes: a start whose GPU pods sit behind a PodDisruptionBudget that
the nodes already in progress (and the starts before it this pass) use up would only hold a slot,
cordoned, its GPUs idle, until the budget frees: it waits at upgrade-required instead, and the next
candidate the domain order allows starts in its place. A budget holds at most as many nodes still
to evict as its `disruptionsAllowed`; one at full health holds at least one, so a budget that never
allows anything still gets its node, which blocks and halts the rollout saying so, as before
(core/rollout/stepping.py), while one a disruption in progress spends (a pod not back yet) holds none until
its pods are back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from functools import cache

from upgrader.core.model.states import State
from upgrader.core.model.views import PdbView, PodView, Snapshot
from upgrader.core.node.capacity import evicted_gpu_pods

# States in which a node still has GPU pods to evict: it holds its budgets' disruptions.
EVICTING = (State.CORDON_REQUIRED, State.WAIT_FOR_JOBS_REQUIRED, State.POD_DELETION_REQUIRED, State.DRAIN_REQUIRED)
PdbCheck = Callable[[str, Collection[str]], "str | None"]


def budgets_of(pods: Sequence[PodView], pdbs: Sequence[PdbView]) -> set[str]:
    """The budgets covering the pods an upgrade of the node evicts (its GPU pods)."""
    return {pdb.key for pod in pods if not pod.terminating for pdb in pdbs if pdb.covers(pod)}


def pdb_check(snapshot: Snapshot) -> PdbCheck | None:
    """For `plan_starts` under pdbAwareStarts: why a node should wait for a budget (None: it may
    start), given the nodes starting before it in this pass. None without a budget, or with no way to
    read a candidate's pods."""
    pods_of = snapshot.candidate_pods
    if not snapshot.pdbs or pods_of is None:
        return None
    pdbs = snapshot.pdbs
    allowed = {p.key: p.disruptions_allowed for p in pdbs}
    # Budgets a disruption in progress spends (some pod not back and healthy): their allowance comes
    # back by itself, so no node starts to wait on it cordoned. Only a budget at full health that
    # allows nothing still gets its one node, which blocks and says so.
    recovering = {p.key: f"currentHealthy {p.current_healthy} of {p.expected_pods}"
                  for p in pdbs if p.current_healthy < p.expected_pods}
    needs: dict[str, set[str]] = {}

    @cache  # once a pass, when a start is first judged: a pass that starts nothing reads nothing more
    def held() -> Counter[str]:
        """The budgets the nodes still evicting hold (their pods read this pass, or, just cordoned, now)."""
        out: Counter[str] = Counter()
        for node in snapshot.nodes.values():
            if node.state in EVICTING:
                out.update(budgets_of(evicted_gpu_pods(pods_of(node.name), snapshot.gpu_claims), pdbs))
        return out

    def check(name: str, starting: Collection[str]) -> str | None:
        if name not in needs:
            needs[name] = budgets_of(evicted_gpu_pods(pods_of(name), snapshot.gpu_claims), pdbs)
        using = Counter(key for other in starting for key in needs.get(other, ()))
        for key in sorted(needs[name]):
            taken = held()[key] + using[key]
            if key in recovering:  # a disruption in progress: it allows more once its pods are back
                if taken >= allowed[key]:
                    return (f"PodDisruptionBudget {key} allows {allowed[key]} disruption(s) while a disruption is "
                            f"in progress ({recovering[key]}) and {taken} node(s) in progress or starting still "
                            "evict under it")
            elif taken >= max(allowed[key], 1):
                return (f"PodDisruptionBudget {key} allows {allowed[key]} disruption(s) and {taken} node(s) "
                        "in progress or starting still evict under it")
        return None

    return check
