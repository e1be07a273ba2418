"""Does the policy fit the fleet: the failure domains it names must be ones the managed GPU nodes are in.

A misspelt `failureDomains.canary` (`us-east-1z`), an `order` entry no node is in, or a `labelKey` no
node carries would otherwise be ignored in silence: the canary would be whichever domain sorts first,
or every node would land in domain `<none>`. Checked by `plan`, and by `run` and `demo` before their
first write; pure, so all three say it in the same words.

- `failureDomains.labelKey` other than the default that no managed node carries is refused. The
  default key (`topology.kubernetes.io/zone`) carried by none is a cluster without zones: every node
  is in one domain, as documented, unless the policy names domains.
- `failureDomains.canary` and each entry of `failureDomains.order` must be the label value of at
  least one managed node.
- With no managed node at all there is nothing to judge against (GPU nodes not joined yet): no problem
  is reported; a controller's later passes say it when the fleet does not fit (see `status_problem`).
"""

from __future__ import annotations

from collections.abc import Iterable, Set

from upgrader.core.fleet import pool_shares as pools
from upgrader.core.fleet.managed import Fleet
from upgrader.core.model.views import NodeView, Snapshot
from upgrader.core.policy.policy import FailureDomains, Policy
from upgrader.core.report.document import LastStatus, RolloutStatus
from upgrader.core.rollout.schedule import NO_DOMAIN

DEFAULT_LABEL_KEY: str = FailureDomains.model_fields["label_key"].default
ZONE_KEYS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
SHOWN = 10  # domains named in a message; the rest are counted


def fleet_problem(policy: Policy, managed: Iterable[NodeView], snapshot: Snapshot | None = None) -> str | None:
    """What in the policy names a failure domain no managed node is in, as `<field>: <why>`; else None.
    With `snapshot`, a pool's own failureDomains are judged against the pool's nodes (core/fleet/pool_shares.py)."""
    nodes = list(managed)
    problem = domains_problem(policy, _domains(policy, nodes), len(nodes))
    if problem is not None or snapshot is None or not policy.pools:
        return problem
    shares = {s.name: s for s in pools.shares(snapshot, policy, Fleet(nodes, [], []))}
    for index, pool in enumerate(policy.pools):
        share = shares[pool.name]
        if pool.failure_domains is not None:
            problem = domains_problem(share.policy, _domains(share.policy, share.managed), len(share.managed))
            if problem is not None:
                return f"pools.{index}.{problem}"
    return None


def _domains(policy: Policy, managed: Iterable[NodeView]) -> set[str]:
    key = policy.failure_domains.label_key
    # An empty value is no domain, as `schedule.domain_of` reads it.
    return {value for node in managed if (value := node.labels.get(key))}


def status_problem(policy: Policy, status: RolloutStatus) -> str | None:
    """The same judgement from a rollout status (its `domains` are those of the managed nodes; a
    pool's, those of its entry in `pools`)."""
    problem = domains_problem(policy, _names(status), status.nodes_total)
    if problem is not None:
        return problem
    for index, pool in enumerate(policy.pools):
        entry = status.pool(pool.name)
        if pool.failure_domains is not None and entry is not None:
            found = domains_problem(policy.for_pool(pool), _names(entry), entry.nodes_total)
            if found is not None:
                return f"pools.{index}.{found}"
    return None


def _names(status: LastStatus) -> set[str]:
    return {d.name for d in status.domains} - {NO_DOMAIN}


def domains_problem(policy: Policy, domains: Set[str], managed: int) -> str | None:
    """`domains`: the values of `failureDomains.labelKey` the `managed` managed nodes carry."""
    if managed == 0:
        return None
    fd = policy.failure_domains
    if not domains and fd.label_key != DEFAULT_LABEL_KEY:
        nodes = "node" if managed == 1 else "nodes"
        return (
            f'failureDomains.labelKey: "{fd.label_key}" is a label no managed GPU node carries ({managed} {nodes}): '
            f"every node would be in domain {NO_DOMAIN}"
        )
    named = [("failureDomains.canary", fd.canary)] if fd.canary else []
    named += [(f"failureDomains.order.{index}", domain) for index, domain in enumerate(fd.order)]
    for field, domain in named:
        if domain not in domains:
            noun, known = _noun(fd.label_key), _known(fd.label_key, domains)
            return f'{field}: "{domain}" is not the {noun} of any managed GPU node ({known})'
    return None


def refusal(problem: str, policy_path: str | None) -> str:
    """The one line a command refuses with: `policy <file>: <field>: <why>`."""
    return f"policy {policy_path}: {problem}" if policy_path else f"policy: {problem}"


def _noun(key: str) -> str:
    return "zone" if key in ZONE_KEYS else "failure domain"


def _known(key: str, domains: Set[str]) -> str:
    if not domains:
        return f"no managed GPU node carries label {key}"
    names = sorted(domains)
    shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    return f"zones: {shown}" if key in ZONE_KEYS else f"label {key}: {shown}"
