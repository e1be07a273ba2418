"""The eviction subresource judged against PodDisruptionBudgets, through the official client.

Pods here are bare (no owning controller), bound to one node, Ready unless a test says otherwise,
with a 30 s grace period so an evicted pod visibly terminates before it goes.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import node_body, pod_body, status_of
from upgrader.sim.cluster import EmulatedCluster

NS = "default"
REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."
GRACE = 30


@pytest.fixture(autouse=True)
def node(core: k8s.CoreV1Api) -> None:
    core.create_node(node_body("node-1"))


def add_pods(
    cluster: EmulatedCluster, count: int, labels: dict[str, str] | None = None, **kw: Any
) -> list[str]:
    names = [f"web-{i}" for i in range(count)]
    for name in names:
        cluster.create("pods", pod_body(name, labels or {"app": "web"}, grace=GRACE, **kw), NS)
    return names


def add_pdb(
    policy: k8s.PolicyV1Api, name: str = "web", match: dict[str, str] | None = None, **spec: Any
) -> None:
    body = {
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": match or {"app": "web"}}, **spec},
    }
    policy.create_namespaced_pod_disruption_budget(NS, body)


def evict(core: k8s.CoreV1Api, name: str, **delete_options: Any) -> Any:
    body = k8s.V1Eviction(
        metadata=k8s.V1ObjectMeta(name=name, namespace=NS),
        delete_options=k8s.V1DeleteOptions(**delete_options) if delete_options else None,
    )
    return core.create_namespaced_pod_eviction(name, NS, body)


def terminating(core: k8s.CoreV1Api) -> list[str]:
    return [p.metadata.name for p in core.list_namespaced_pod(NS).items if p.metadata.deletion_timestamp]


def pod_names(core: k8s.CoreV1Api) -> list[str]:
    return [p.metadata.name for p in core.list_namespaced_pod(NS).items]


def budget(policy: k8s.PolicyV1Api, name: str = "web") -> k8s.V1PodDisruptionBudgetStatus:
    return policy.read_namespaced_pod_disruption_budget(name, NS).status


def counts(status: k8s.V1PodDisruptionBudgetStatus) -> tuple[int, int, int, int]:
    """(expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed)."""
    return (status.expected_pods, status.current_healthy, status.desired_healthy, status.disruptions_allowed)


def assert_refused(err: ApiException, pdb: str, desired: int, healthy: int) -> None:
    assert (err.status, err.reason) == (429, "Too Many Requests")
    body = status_of(err)
    assert (body["reason"], body["message"]) == ("TooManyRequests", REFUSAL)
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": f"The disruption budget {pdb} needs {desired} healthy pods "
            f"and has {healthy} currently",
        }
    ]


@pytest.mark.parametrize(
    ("spec", "desired", "allowed"),
    [
        ({"minAvailable": 3}, 3, 1),
        ({"minAvailable": "50%"}, 2, 2),
        ({"minAvailable": "60%"}, 3, 1),  # 2.4 rounds up
        ({"maxUnavailable": 1}, 3, 1),
        ({"maxUnavailable": "30%"}, 2, 2),  # 1.2 unavailable rounds up to 2
        ({"maxUnavailable": 0}, 4, 0),
    ],
    ids=[
        "minAvailable-int",
        "minAvailable-50%",
        "minAvailable-60%",
        "maxUnavailable-int",
        "maxUnavailable-30%",
        "maxUnavailable-0",
    ],
)
def test_evictions_stop_where_the_budget_says(
    cluster: EmulatedCluster,
    core: k8s.CoreV1Api,
    policy: k8s.PolicyV1Api,
    spec: dict[str, Any],
    desired: int,
    allowed: int,
) -> None:
    pods = add_pods(cluster, 4)
    add_pdb(policy, **spec)
    status = budget(policy)
    assert counts(status) == (4, 4, desired, allowed)

    for name in pods[:allowed]:
        assert evict(core, name).kind == "Status"
    assert terminating(core) == pods[:allowed]  # evicted pods terminate gracefully, still listed
    with pytest.raises(ApiException) as err:
        evict(core, pods[allowed])
    assert_refused(err.value, "web", desired, 4 - allowed)
    assert terminating(core) == pods[:allowed]  # the refused pod is untouched
    assert budget(policy).disruptions_allowed == 0

    cluster.advance(GRACE)
    assert pod_names(core) == pods[allowed:]


def test_a_second_quick_eviction_is_refused_while_the_first_pod_terminates(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api
) -> None:
    add_pods(cluster, 3)
    add_pdb(policy, maxUnavailable=1)

    evict(core, "web-0")
    with pytest.raises(ApiException) as err:
        evict(core, "web-1")
    assert_refused(err.value, "web", 2, 2)
    status = budget(policy)
    assert (status.expected_pods, status.current_healthy, status.disruptions_allowed) == (3, 2, 0)

    cluster.advance(GRACE - 1)
    assert terminating(core) == ["web-0"]
    cluster.advance(1)
    assert pod_names(core) == ["web-1", "web-2"]
    # With the evicted pod gone (and nothing replacing it) the budget is recomputed over two pods.
    status = budget(policy)
    assert (status.expected_pods, status.current_healthy, status.desired_healthy) == (2, 2, 1)
    evict(core, "web-1")
    assert terminating(core) == ["web-1"]


def test_a_pod_no_budget_covers_is_deleted(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api
) -> None:
    add_pods(cluster, 1, {"app": "batch"})
    add_pdb(policy, minAvailable=1)  # selects app=web only

    evict(core, "web-0")

    pod = core.read_namespaced_pod("web-0", NS)
    assert pod.metadata.deletion_grace_period_seconds == GRACE
    cluster.advance(GRACE)
    assert pod_names(core) == []


def test_eviction_delete_options_apply(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
    add_pods(cluster, 2)
    evict(core, "web-0", grace_period_seconds=0)
    assert pod_names(core) == ["web-1"]
    with pytest.raises(ApiException) as err:
        evict(core, "web-1", preconditions=k8s.V1Preconditions(uid="someone-else"))
    assert err.value.status == 409
    assert pod_names(core) == ["web-1"] and terminating(core) == []


def test_two_budgets_over_one_pod_is_a_server_error(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api
) -> None:
    add_pods(cluster, 2)
    add_pdb(policy, "one", maxUnavailable=1)
    add_pdb(policy, "two", minAvailable=0)

    with pytest.raises(ApiException) as err:
        evict(core, "web-0")

    assert err.value.status == 500
    assert status_of(err.value)["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    )
    assert terminating(core) == []


def test_evicting_a_missing_pod_is_not_found(core: k8s.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        evict(core, "ghost")
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'pods "ghost" not found'


@pytest.mark.parametrize("body_name", ["other", None], ids=["different", "missing"])
def test_the_eviction_must_name_the_pod(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, body_name: str | None
) -> None:
    add_pods(cluster, 1)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("web-0", NS, {"metadata": {"name": body_name, "namespace": NS}})
    assert err.value.status == 400
    assert status_of(err.value)["message"] == "name in URL does not match name in Eviction object"
    assert terminating(core) == []


# ----- unhealthy and not-yet-running pods ---------------------------------------------------


def test_an_unready_pod_may_go_while_the_budget_is_met(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api
) -> None:
    add_pods(cluster, 3)
    cluster.create("pods", pod_body("sick", {"app": "web"}, ready=False, grace=GRACE), NS)
    add_pdb(policy, minAvailable=3)
    assert budget(policy).disruptions_allowed == 0

    evict(core, "sick")  # does not count as healthy: evicting it disrupts nothing
    with pytest.raises(ApiException) as err:
        evict(core, "web-0")
    assert_refused(err.value, "web", 3, 3)
    assert terminating(core) == ["sick"]


@pytest.mark.parametrize(
    ("policy_name", "evicted"),
    [(None, False), ("IfHealthyBudget", False), ("AlwaysAllow", True)],
    ids=["default", "IfHealthyBudget", "AlwaysAllow"],
)
def test_an_unready_pod_of_a_budget_that_is_not_met(
    cluster: EmulatedCluster,
    core: k8s.CoreV1Api,
    policy: k8s.PolicyV1Api,
    policy_name: str | None,
    evicted: bool,
) -> None:
    add_pods(cluster, 2)
    cluster.create("pods", pod_body("sick", {"app": "web"}, ready=False, grace=GRACE), NS)
    spec: dict[str, Any] = {"minAvailable": 3}
    if policy_name:
        spec["unhealthyPodEvictionPolicy"] = policy_name
    add_pdb(policy, **spec)

    if evicted:
        evict(core, "sick")
        assert terminating(core) == ["sick"]
    else:
        with pytest.raises(ApiException) as err:
            evict(core, "sick")
        assert_refused(err.value, "web", 3, 2)
        assert terminating(core) == []


def test_an_unready_pod_is_kept_when_the_budget_wants_no_healthy_pods(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api
) -> None:
    # The real handler lets an unready pod go only when desiredHealthy > 0; with nothing healthy
    # and nothing desired, disruptionsAllowed is 0 and the eviction is refused.
    cluster.create("pods", pod_body("sick", {"app": "web"}, ready=False, grace=GRACE), NS)
    add_pdb(policy, maxUnavailable="100%")
    with pytest.raises(ApiException) as err:
        evict(core, "sick")
    assert_refused(err.value, "web", 0, 0)


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed"])
def test_pending_and_finished_pods_skip_the_budget(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api, phase: str
) -> None:
    add_pods(cluster, 1)
    cluster.create("pods", pod_body("odd", {"app": "web"}, ready=False, phase=phase, grace=GRACE), NS)
    add_pdb(policy, minAvailable=1)
    assert budget(policy).disruptions_allowed == 0

    evict(core, "odd")

    if phase == "Pending":
        assert terminating(core) == ["odd"]
    else:
        assert pod_names(core) == ["web-0"]  # a finished pod is deleted at once


def test_a_terminating_pod_can_be_evicted_again(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api
) -> None:
    add_pods(cluster, 2)
    add_pdb(policy, minAvailable=1)
    evict(core, "web-0")
    evict(core, "web-0")  # already going: no budget check, no error
    assert terminating(core) == ["web-0"]


# ----- PDB status as the disruption controller computes it ------------------------------------


def test_budget_status_follows_pods(
    cluster: EmulatedCluster, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api
) -> None:
    add_pdb(policy, maxUnavailable="50%")
    status = budget(policy)
    assert counts(status) == (0, 0, 0, 0)
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [
        ("DisruptionAllowed", "False", "InsufficientPods")
    ]

    add_pods(cluster, 4)
    cluster.create("pods", pod_body("sick", {"app": "web"}, ready=False, grace=GRACE), NS)
    cluster.create("pods", pod_body("done", {"app": "web"}, ready=False, phase="Succeeded"), NS)
    cluster.create("pods", pod_body("stranger", {"app": "db"}, grace=GRACE), NS)
    status = budget(policy)
    # 5 running pods expected, 4 healthy, ceil(2.5) = 3 may be unavailable -> 2 must stay healthy.
    assert counts(status) == (5, 4, 2, 2)
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [
        ("DisruptionAllowed", "True", "SufficientPods")
    ]

    core.delete_namespaced_pod("web-0", NS)  # terminating: still expected, no longer healthy
    status = budget(policy)
    assert (status.expected_pods, status.current_healthy, status.disruptions_allowed) == (5, 3, 1)


def test_an_integer_min_available_expects_every_selected_pod(
    cluster: EmulatedCluster, policy: k8s.PolicyV1Api
) -> None:
    add_pods(cluster, 2)
    cluster.create("pods", pod_body("done", {"app": "web"}, ready=False, phase="Succeeded"), NS)
    add_pdb(policy, minAvailable=1)
    status = budget(policy)
    # The disruption controller counts every pod its selector lists when minAvailable is a number.
    assert counts(status) == (3, 2, 1, 1)
