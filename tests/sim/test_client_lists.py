"""Label and field selectors, and `limit`/`continue` paging, through the official client (in-process)."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import names, node_body, pod_body, status_of, watch_events
from upgrader.sim.cluster import EmulatedCluster

# ----- selectors and paging ------------------------------------------------------------------


@pytest.fixture
def labelled_nodes(core: k8s.CoreV1Api) -> None:
    labels = {
        "a1": {"tier": "a", "gpu": "h100", "slots": "8"},
        "a2": {"tier": "a", "slots": "2"},
        "b1": {"tier": "b", "gpu": "a100"},
        "c1": {"tier": "c", "gpu": "h100", "slots": "x"},
        "none": {},
    }
    for name, node_labels in labels.items():
        core.create_node(node_body(name, node_labels))


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=a", ["a1", "a2"]),
        ("tier==a", ["a1", "a2"]),
        ("tier!=a", ["b1", "c1", "none"]),
        ("tier in (a,b)", ["a1", "a2", "b1"]),
        ("tier notin (a, b)", ["c1", "none"]),
        ("gpu", ["a1", "b1", "c1"]),
        ("!gpu", ["a2", "none"]),
        ("gpu,tier!=c", ["a1", "b1"]),
        ("gpu in (h100),tier in (a,c),!absent", ["a1", "c1"]),
        ("slots>4", ["a1"]),
        ("slots<4", ["a2"]),
        ("tier=zzz", []),
    ],
)
def test_label_selectors(
    core: k8s.CoreV1Api, labelled_nodes: None, selector: str, expected: list[str]
) -> None:
    assert names(core.list_node(label_selector=selector).items) == expected


@pytest.mark.parametrize(
    "selector",
    [
        "tier in (a",
        "tier=a=b",
        "!tier=a",
        "tier in a",
        "tier=a,",
        "x" * 64 + "=y",
        "Bad.Prefix/k=v",
        "slots>x",
    ],
)
def test_a_malformed_label_selector_is_a_bad_request(
    core: k8s.CoreV1Api, labelled_nodes: None, selector: str
) -> None:
    with pytest.raises(ApiException) as err:
        core.list_node(label_selector=selector)
    assert (err.value.status, err.value.reason) == (400, "Bad Request")
    assert status_of(err.value)["reason"] == "BadRequest"
    with pytest.raises(ApiException) as err:
        watch_events(core.list_node, label_selector=selector)
    assert err.value.status == 400


def test_field_selectors_on_node_name_and_unschedulable(
    core: k8s.CoreV1Api, cluster: EmulatedCluster
) -> None:
    core.create_node(node_body("node-1"))
    core.create_node(node_body("node-2"))
    core.patch_node("node-2", {"spec": {"unschedulable": True}})
    for name, node in (("p1", "node-1"), ("p2", "node-2"), ("p3", "node-1"), ("pending", None)):
        cluster.create("pods", pod_body(name, node=node), "default")

    def pods(selector: str) -> list[str]:
        return names(core.list_namespaced_pod("default", field_selector=selector).items)

    assert pods("spec.nodeName=node-1") == ["p1", "p3"]
    assert pods("spec.nodeName!=node-1") == ["p2", "pending"]
    assert pods("spec.nodeName=") == ["pending"]
    assert pods("spec.nodeName=node-1,metadata.name!=p1") == ["p3"]
    # An unset bool field reads as "false", as the API server's field set has it.
    assert names(core.list_node(field_selector="spec.unschedulable=false").items) == ["node-1"]
    assert names(core.list_node(field_selector="spec.unschedulable=true").items) == ["node-2"]


def test_paging_returns_every_item_exactly_once(core: k8s.CoreV1Api) -> None:
    for i in range(11):
        core.create_node(node_body(f"n{i:02d}", {"even": str(i % 2 == 0).lower()}))

    pages, token = [], None
    while True:
        page = core.list_node(limit=4, _continue=token)
        pages.append((names(page.items), page.metadata.remaining_item_count))
        token = page.metadata.var_continue
        if not token:
            break
    assert [len(p) for p, _ in pages] == [4, 4, 3]
    assert [remaining for _, remaining in pages] == [7, 3, None]
    seen = [n for p, _ in pages for n in p]
    assert seen == sorted(seen) and len(set(seen)) == 11


def test_paging_with_a_selector_leaves_remaining_count_unset(core: k8s.CoreV1Api) -> None:
    for i in range(11):
        core.create_node(node_body(f"n{i:02d}", {"even": str(i % 2 == 0).lower()}))
    seen, token = [], None
    while True:
        page = core.list_node(limit=2, label_selector="even=true", _continue=token)
        # With a selector the server cannot know how many remain: the field stays unset.
        assert page.metadata.remaining_item_count is None
        seen += names(page.items)
        token = page.metadata.var_continue
        if not token:
            break
    assert seen == ["n00", "n02", "n04", "n06", "n08", "n10"]


def test_paging_survives_deletion_between_pages(core: k8s.CoreV1Api) -> None:
    for i in range(6):
        core.create_node(node_body(f"n{i}"))
    first = core.list_node(limit=3)
    core.delete_node("n1")  # already returned
    core.delete_node("n4")  # not yet returned
    rest = core.list_node(limit=3, _continue=first.metadata.var_continue)
    assert names(first.items) == ["n0", "n1", "n2"]
    assert names(rest.items) == ["n3", "n5"]
    assert rest.metadata.var_continue is None


def test_a_garbled_continue_token_is_a_bad_request(core: k8s.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_node(limit=1, _continue="not-a-token")
    assert err.value.status == 400
