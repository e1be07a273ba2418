"""Compatibility profiles (docs/compatibility.md#compatibility-profiles): a combination is admitted on a node
only if a qualified, unexpired profile for exactly that combination selects the node."""

from __future__ import annotations

import copy
from datetime import date
from typing import Any

import pytest

from upgrader.core.compat.profiles import Profile, qualification
from upgrader.core.model.views import node_view

from .profiles_fixtures import A100, DRIVER, H100, K105, K113, OS, P5, TODAY, profile

# ----- qualification ---------------------------------------------------------------------------------


def node_labels(instance_type: str = "p5.48xlarge", **extra: str) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": "gpu-a-01",
        "node.kubernetes.io/instance-type": instance_type,
        "nvidia.com/gpu.product": H100,
        **extra,
    }


def ask(
    profiles: list[Profile],
    labels: dict[str, str] | None = None,
    *,
    product: str = H100,
    driver: str = DRIVER,
    kernel: str = K113,
    os: str = OS,
    today: date = TODAY,
) -> tuple[Profile | None, str]:
    return qualification(
        profiles, node_labels() if labels is None else labels, product, driver, kernel, os, today
    )


def test_a_covering_profile_admits_the_node() -> None:
    p = profile()
    assert ask([p]) == (p, "")


@pytest.mark.parametrize(
    ("today", "admitted"),
    [
        (date(2026, 5, 4), True),  # the qualification day
        (date(2027, 5, 3), True),  # the last day before expiry
        (date(2027, 5, 4), False),  # expires is the first day it no longer covers
        (date(2030, 1, 1), False),
    ],
)
def test_expiry_boundary(today: date, admitted: bool) -> None:
    p = profile()
    covering, reason = ask([p], today=today)
    assert (covering is p) is admitted
    assert (reason == "") is admitted
    if not admitted:
        assert reason == "only an expired profile covers this node: h100-550 v2 expired 2027-05-04"


@pytest.mark.parametrize(
    ("asked", "described"),
    [
        ({"product": A100}, f"{A100}, driver {DRIVER}, kernel {K113}, {OS}"),
        ({"driver": "550.90.12"}, f"{H100}, driver 550.90.12, kernel {K113}, {OS}"),
        ({"driver": "550.90"}, f"{H100}, driver 550.90, kernel {K113}, {OS}"),
        ({"driver": "535.161.08"}, f"{H100}, driver 535.161.08, kernel {K113}, {OS}"),
        ({"kernel": K105}, f"{H100}, driver {DRIVER}, kernel {K105}, {OS}"),
        ({"os": "ubuntu24.04"}, f"{H100}, driver {DRIVER}, kernel {K113}, ubuntu24.04"),
    ],
)
def test_every_part_of_the_combination_must_match_exactly(asked: dict[str, str], described: str) -> None:
    assert ask([profile()], **asked) == (None, f"no profile for {described}")  # type: ignore[arg-type]


def test_driver_versions_compare_as_numbers_not_text() -> None:
    p = profile()
    assert ask([p], driver="550.90.7") == (p, "")
    assert ask([profile(driver="550.90.7")], driver="550.90.07")[0] is not None


def test_byte_identical_node_outside_the_selector_is_not_qualified() -> None:
    """DOMAIN §6: the qualified p5 node is admitted; the same combination on a p4d node is not."""
    p = profile()
    assert ask([p], node_labels("p5.48xlarge")) == (p, "")
    assert ask([p], node_labels("p4d.24xlarge")) == (
        None,
        f"qualified on other nodes only: h100-550 v2 (selector {P5})",
    )


def test_node_without_the_selected_label_is_not_qualified() -> None:
    assert ask([profile()], {"nvidia.com/gpu.product": H100}) == (
        None,
        f"qualified on other nodes only: h100-550 v2 (selector {P5})",
    )


@pytest.mark.parametrize(
    ("selector", "labels", "admitted"),
    [
        ("", {}, True),
        ("", node_labels("p4d.24xlarge"), True),
        ("pool=serve", node_labels(pool="serve"), True),
        ("pool=serve", node_labels(pool="train"), False),
        ("pool in (serve,batch)", node_labels(pool="batch"), True),
        ("pool notin (train)", node_labels(), True),
        ("!canary", node_labels(canary="true"), False),
        ("canary", node_labels(canary="true"), True),
        (
            f"{P5},topology.kubernetes.io/zone=us-east-1a",
            node_labels(**{"topology.kubernetes.io/zone": "us-east-1a"}),
            True,
        ),
        (
            f"{P5},topology.kubernetes.io/zone=us-east-1a",
            node_labels(**{"topology.kubernetes.io/zone": "us-east-1b"}),
            False,
        ),
    ],
)
def test_selector_forms(selector: str, labels: dict[str, str], admitted: bool) -> None:
    p = profile(nodeSelector=selector)
    assert (ask([p], labels)[0] is p) is admitted


def test_highest_unexpired_version_wins() -> None:
    v1, v2, v3 = profile(version=1), profile(version=2), profile(version=3, expires=date(2026, 6, 1))
    assert ask([v1, v3, v2]) == (v2, "")  # v3 expired; v2 beats v1
    assert ask([v1, v3, v2], today=date(2026, 5, 20)) == (v3, "")


def test_equal_versions_pick_by_name() -> None:
    b, a = profile(name="b-profile"), profile(name="a-profile")
    assert ask([b, a]) == (a, "")


def test_unrelated_profiles_do_not_cover() -> None:
    others = [profile(name="a100", gpuProduct=A100), profile(name="k105", kernel=K105)]
    assert ask(others)[0] is None
    assert ask(others)[1].startswith("no profile for")


EARLY = {"date": date(2025, 6, 2), "by": "jdoe", "record": "GPU-1"}


def test_only_expired_profiles_name_each_with_its_date() -> None:
    old = [
        profile(version=1, expires=date(2026, 1, 31), qualification=EARLY),
        profile(version=3, expires=date(2026, 8, 31)),
    ]
    assert ask(old) == (
        None,
        "only an expired profile covers this node: h100-550 v3 expired 2026-08-31, "
        "h100-550 v1 expired 2026-01-31",
    )


def test_expired_here_is_more_specific_than_valid_elsewhere() -> None:
    here = profile(version=3, expires=date(2026, 1, 31), qualification=EARLY)
    elsewhere = profile(version=4, nodeSelector="node.kubernetes.io/instance-type=p4d.24xlarge")
    assert ask([elsewhere, here]) == (
        None,
        "only an expired profile covers this node: h100-550 v3 expired 2026-01-31",
    )


def test_elsewhere_lists_every_profile_and_marks_expired_ones() -> None:
    live = profile(name="p4d", nodeSelector="node.kubernetes.io/instance-type=p4d.24xlarge")
    dead = profile(name="pool", nodeSelector="pool=serve", expires=date(2026, 6, 1))
    assert ask([live, dead]) == (
        None,
        "qualified on other nodes only: p4d v2 (selector node.kubernetes.io/instance-type=p4d.24xlarge), "
        "pool v2 (selector pool=serve; expired 2026-06-01)",
    )


@pytest.mark.parametrize(
    ("asked", "reason"),
    [
        ({"driver": ""}, "driver version '' is not a dotted version like 550.90.07"),
        ({"driver": "550"}, "driver version '550' is not a dotted version like 550.90.07"),
        ({"driver": "latest"}, "driver version 'latest' is not a dotted version like 550.90.07"),
        ({"driver": "550.90.07 "}, "driver version '550.90.07 ' is not a dotted version like 550.90.07"),
        ({"product": ""}, "the node's GPU product is unknown"),
        ({"kernel": ""}, "the node's kernel is unknown"),
        ({"os": ""}, "the node's OS is unknown"),
    ],
)
def test_unreadable_input_is_a_refusal_not_an_exception(asked: dict[str, str], reason: str) -> None:
    assert ask([profile()], **asked) == (None, reason)  # type: ignore[arg-type]


def test_with_a_real_node_view() -> None:
    """The labels come from the node as the API returns it (the emulator's H100 node shape)."""
    obj: dict[str, Any] = {
        "metadata": {
            "name": "gpu-a-01",
            "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge", "nvidia.com/gpu.product": H100},
        }
    }
    twin = copy.deepcopy(obj)
    twin["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "p5e.48xlarge"
    p = profile()
    node, other = node_view(obj), node_view(twin)
    assert qualification(
        [p], node.labels, node.labels["nvidia.com/gpu.product"], DRIVER, K113, OS, TODAY
    ) == (p, "")
    assert qualification([p], other.labels, H100, DRIVER, K113, OS, TODAY)[0] is None
