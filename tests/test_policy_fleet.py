"""Issue 13, "Refuse what it cannot judge": a failure domain the policy names must be one the managed
GPU nodes are in (`upgrader.core.plan.policy_fit`, pure; plan, run and demo refuse with its words)."""

from __future__ import annotations

import pytest

from tests.core.factories import node, policy
from upgrader.core.plan.policy_fit import domains_problem, fleet_problem, refusal, status_problem
from upgrader.core.report.document import RolloutStatus
from upgrader.core.report.entries import DomainCount
from upgrader.core.report.kinds import Phase

ZONES = [node("a1", zone="us-east-1a"), node("a2", zone="us-east-1a"), node("b1", zone="us-east-1b"),
         node("c1", zone="us-east-1c")]
KNOWN = "(zones: us-east-1a, us-east-1b, us-east-1c)"


def domains(**failure_domains: object) -> dict[str, object]:
    return {"failureDomains": failure_domains}


@pytest.mark.parametrize("data", [
    {},
    domains(canary="us-east-1b"),
    domains(order=["us-east-1c", "us-east-1a"], canary="us-east-1b"),
    domains(labelKey="topology.kubernetes.io/zone"),
], ids=["defaults", "canary", "order-and-canary", "default-key-written-out"])
def test_a_policy_naming_domains_the_nodes_are_in_fits(data: dict[str, object]) -> None:
    assert fleet_problem(policy(**data), ZONES) is None


@pytest.mark.parametrize(("data", "problem"), [
    (domains(canary="us-east-1z"),
     f'failureDomains.canary: "us-east-1z" is not the zone of any managed GPU node {KNOWN}'),
    (domains(order=["us-east-1a", "us-east-1d"]),
     f'failureDomains.order.1: "us-east-1d" is not the zone of any managed GPU node {KNOWN}'),
    (domains(order=["us-east-1d"], canary="us-east-1x"),  # the canary is named first
     f'failureDomains.canary: "us-east-1x" is not the zone of any managed GPU node {KNOWN}'),
    (domains(labelKey="topology.kubernetes.io/zoen"),
     'failureDomains.labelKey: "topology.kubernetes.io/zoen" is a label no managed GPU node carries (4 nodes): '
     "every node would be in domain <none>"),
    (domains(labelKey="example.com/rack", canary="r1"),  # the key first: it is why the canary is missing
     'failureDomains.labelKey: "example.com/rack" is a label no managed GPU node carries (4 nodes): '
     "every node would be in domain <none>"),
], ids=["canary-misspelt", "order-entry-absent", "canary-before-order", "label-key-misspelt", "key-before-canary"])
def test_a_named_domain_no_managed_node_is_in_is_named(data: dict[str, object], problem: str) -> None:
    assert fleet_problem(policy(**data), ZONES) == problem


def test_other_label_keys_are_failure_domains_not_zones() -> None:
    racks = [node("n1", labels={"example.com/rack": "r1"}), node("n2", labels={"example.com/rack": "r2"})]
    assert fleet_problem(policy(**domains(labelKey="example.com/rack", canary="r3")), racks) == (
        'failureDomains.canary: "r3" is not the failure domain of any managed GPU node '
        "(label example.com/rack: r1, r2)")


def test_a_cluster_without_zones_is_one_domain_unless_the_policy_names_some() -> None:
    """The default key carried by no node is a cluster without zones (on premises): fine, as documented;
    a canary named there has nothing to be."""
    bare = [node("n1"), node("n2", labels={"topology.kubernetes.io/zone": ""})]  # empty: no domain
    assert fleet_problem(policy(), bare) is None
    assert fleet_problem(policy(**domains(canary="us-east-1a")), bare) == (
        'failureDomains.canary: "us-east-1a" is not the zone of any managed GPU node '
        "(no managed GPU node carries label topology.kubernetes.io/zone)")


def test_no_managed_node_at_all_is_nothing_to_judge() -> None:
    """GPU nodes not joined yet (a pool scaled to zero): a controller's later passes say it instead."""
    assert fleet_problem(policy(**domains(canary="us-east-1z", labelKey="example.com/rack")), []) is None


def test_many_domains_are_counted_past_ten() -> None:
    racks = {f"r{i:02d}" for i in range(14)}
    problem = domains_problem(policy(**domains(canary="us-east-1z")), racks, 14)
    assert problem is not None
    assert problem.endswith("(zones: r00, r01, r02, r03, r04, r05, r06, r07, r08, r09 and 4 more)")


def test_the_status_of_a_pass_is_judged_the_same() -> None:
    status = RolloutStatus(Phase.RUNNING, "rolling", nodes_total=3, domains=(
        DomainCount("us-east-1b", True, 2, 0, 0, 0, {}), DomainCount("<none>", False, 1, 0, 0, 0, {})))
    assert status_problem(policy(**domains(canary="us-east-1b")), status) is None
    assert status_problem(policy(**domains(canary="us-east-1a")), status) == (
        'failureDomains.canary: "us-east-1a" is not the zone of any managed GPU node (zones: us-east-1b)')
    assert status_problem(policy(**domains(canary="us-east-1a")), RolloutStatus(Phase.RUNNING, "rolling")) is None


def test_the_refusal_names_the_policy_file_when_known() -> None:
    assert refusal("failureDomains.canary: x", "policies/x.yaml") == "policy policies/x.yaml: failureDomains.canary: x"
    assert refusal("failureDomains.canary: x", None) == "policy: failureDomains.canary: x"
