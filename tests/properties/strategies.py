"""Hypothesis strategies: random fleets and random upgrade policies.

`blockers=False` draws only what lets a rollout finish by itself (every pod evictable in time,
every driver image present, budgets that free up once evicted replicas find a node again).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from upgrader.core.policy.policy import Policy, policy_from_mapping

from .world_objects import JOB_SELECTOR, FleetSpec, NodeSpec, WorkloadSpec

ZONES = ("a", "b", "c")
MAX_NODES = 7


def rarely(p_true: int = 4) -> st.SearchStrategy[bool]:
    """True about once in `p_true` draws; shrinks to False."""
    return st.sampled_from([False] * (p_true - 1) + [True])


@st.composite
def node_specs(draw: st.DrawFn, zones: list[str], blockers: bool) -> NodeSpec:
    return NodeSpec(
        zone=draw(st.sampled_from(zones)) if not draw(rarely(8)) else None,
        gpu=not draw(rarely(8)),
        current=draw(rarely(5)),
        requested=draw(rarely(8)),
        cordoned=draw(rarely(5)),
        image_broken=draw(rarely(6)) if blockers else False,
        skip=draw(rarely(10)),
    )


@st.composite
def fleets(draw: st.DrawFn, blockers: bool = True) -> FleetSpec:
    count = draw(st.integers(1, MAX_NODES))
    zones = draw(st.lists(st.sampled_from(ZONES), min_size=1, max_size=len(ZONES), unique=True))
    nodes = [draw(node_specs(zones, blockers)) for _ in range(count)]
    nodes[0] = NodeSpec(**{**nodes[0].__dict__, "gpu": True, "skip": False})  # at least one managed node
    gpu = [i for i, n in enumerate(nodes) if n.gpu]
    # Without blockers, replicas live only on nodes nobody else cordoned: a foreign cordon is never
    # lifted, so replicas evicted there could be left with nowhere to go and their budget stuck.
    hosts = [i for i in range(count) if not (nodes[i].cordoned and not blockers)] or [0]
    gpu_hosts = [i for i in hosts if nodes[i].gpu] or [0]
    workloads = []
    for _ in range(draw(st.integers(0, 3))):
        gpus = draw(st.sampled_from([1, 1, 2, 0]))
        candidates = gpu_hosts if gpus else hosts
        anti = draw(st.booleans()) if blockers else True
        if anti:
            placements = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=4, unique=True))
        else:
            placements = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=4))
        replicas = len(placements)
        if draw(st.booleans()):
            top = replicas + 1 if blockers else replicas - 1
            min_available: int | None = draw(st.integers(0, top))
        else:
            min_available = None
        workloads.append(
            WorkloadSpec(
                placements=tuple(placements),
                gpus=gpus,
                min_available=min_available,
                anti_affinity=anti,
                empty_dir=draw(rarely(6)) if blockers else False,
                unready=tuple(draw(st.lists(st.integers(0, replicas - 1), max_size=2))) if blockers else (),
            )
        )
    jobs = draw(st.lists(st.tuples(st.sampled_from(gpu), st.sampled_from([0, 1])), max_size=3))
    bare = [draw(st.sampled_from(gpu))] if blockers and draw(rarely(4)) else []
    gpu_daemons = [draw(st.sampled_from(gpu))] if blockers and draw(rarely(5)) else []
    return FleetSpec(tuple(nodes), tuple(workloads), tuple(jobs), tuple(bare), tuple(gpu_daemons))


@st.composite
def policy_data(draw: st.DrawFn, blockers: bool = True) -> dict[str, Any]:
    """upgradePolicy keys as a policy file gives them."""
    on_blocked_timeout = draw(st.sampled_from(["halt", "fail"]))

    def block_timeout(choices: list[int]) -> int:
        # Without blockers a wait may outlast its timeout only when that halts (and resumes).
        return draw(st.sampled_from(choices)) if blockers or on_blocked_timeout == "halt" else 0

    domains: dict[str, Any] = {
        "order": draw(st.lists(st.sampled_from([*ZONES, "d"]), unique=True, max_size=3)),
        "soakSeconds": draw(st.sampled_from([0, 0, 60, 600])),
    }
    canary = draw(st.sampled_from([None, *ZONES, "d"]))
    if canary is not None:
        domains["canary"] = canary
    bool_ = st.booleans()
    drain = draw(bool_)
    return {
        "autoUpgrade": not draw(rarely(10)) if blockers else True,
        "maxParallelUpgrades": draw(st.integers(0, 4)),
        "maxUnavailable": draw(st.one_of(st.integers(1, 5), st.integers(1, 100).map(lambda p: f"{p}%"))),
        "failureDomains": domains,
        "waitForCompletion": {
            "podSelector": draw(st.sampled_from(["", JOB_SELECTOR])),
            "timeoutSeconds": block_timeout([0, 60, 300, 1800]),
        },
        "gpuPodDeletion": {
            "force": draw(bool_),
            "deleteEmptyDir": draw(bool_),
            "timeoutSeconds": block_timeout([0, 60, 300]),
        },
        "drainEveryNode": drain and draw(rarely(3)),
        "drain": {
            "enable": drain,
            "podSelector": draw(st.sampled_from(["", "app=web-0", "app in (web-1,web-2)"])),
            "force": draw(bool_),
            "deleteEmptyDir": draw(bool_),
            "timeoutSeconds": block_timeout([0, 60, 300]),
        },
        "validation": {
            "podSelector": draw(st.sampled_from(["app=nvidia-operator-validator", ""])),
            "timeoutSeconds": draw(st.sampled_from([60, 300, 600])),
        },
        "podRestart": {"timeoutSeconds": draw(st.sampled_from([60, 300, 600]))},
        "onBlockedTimeout": on_blocked_timeout,
        "onNodeFailure": draw(st.sampled_from(["halt", "continue"])),
    }


def policies(blockers: bool = True) -> st.SearchStrategy[Policy]:
    return policy_data(blockers).map(policy_from_mapping)
