"""Compatibility profiles (DOMAIN.md §6): a combination is admitted on a node only if a qualified,
unexpired profile for exactly that combination selects the node."""

from __future__ import annotations

import copy
from datetime import date
from typing import Any

import pytest
import yaml

from upgrader.core.profiles import Profile, load_profiles_text, qualification
from upgrader.core.views import node_view

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
K105, K113 = "5.15.0-105-generic", "5.15.0-113-generic"
DRIVER, OS = "550.90.07", "ubuntu22.04"
P5 = "node.kubernetes.io/instance-type=p5.48xlarge"
TODAY = date(2026, 11, 29)
SOURCE = "profiles.yaml"


def entry(**changes: Any) -> dict[str, Any]:
    """One profile as it sits in the YAML file (camelCase keys); `changes` override or, with None, drop."""
    data: dict[str, Any] = {
        "name": "h100-550",
        "version": 2,
        "owner": "gpu-platform",
        "qualification": {"date": date(2026, 5, 4), "by": "jdoe", "record": "https://tickets.example/GPU-1"},
        "expires": date(2027, 5, 4),
        "gpuProduct": H100,
        "driver": DRIVER,
        "kernel": K113,
        "os": OS,
        "nodeSelector": P5,
    }
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def dump(*entries: dict[str, Any]) -> str:
    return yaml.safe_dump({"profiles": list(entries)}, sort_keys=False)


def profile(**changes: Any) -> Profile:
    return load_profiles_text(dump(entry(**changes)))[0]


def load_error(text: str) -> str:
    with pytest.raises(ValueError) as err:
        load_profiles_text(text, SOURCE)
    message = str(err.value)
    assert len(message.splitlines()) == 1, message
    assert message.startswith(f"profiles {SOURCE}: "), message
    return message.removeprefix(f"profiles {SOURCE}: ")


# ----- loading ---------------------------------------------------------------------------------------


def test_loads_a_profile_with_camel_case_keys() -> None:
    text = """
profiles:
  - name: h100-550
    version: 2
    owner: gpu-platform
    qualification: {date: 2026-05-04, by: jdoe, record: "https://tickets.example/GPU-1"}
    expires: 2027-05-04
    gpuProduct: NVIDIA-H100-80GB-HBM3
    driver: "550.90.07"
    kernel: 5.15.0-113-generic
    os: ubuntu22.04
    nodeSelector: node.kubernetes.io/instance-type=p5.48xlarge
"""
    [p] = load_profiles_text(text, SOURCE)
    assert (p.name, p.version, p.owner) == ("h100-550", 2, "gpu-platform")
    assert (p.qualification.date, p.qualification.by, p.qualification.record) == (
        date(2026, 5, 4),
        "jdoe",
        "https://tickets.example/GPU-1",
    )
    assert p.expires == date(2027, 5, 4)
    assert (p.gpu_product, p.driver, p.kernel, p.os, p.node_selector) == (H100, DRIVER, K113, OS, P5)
    assert p.selector.matches({"node.kubernetes.io/instance-type": "p5.48xlarge"})
    assert p.model_dump(by_alias=True)["gpuProduct"] == H100


def test_snake_case_names_build_the_same_profile() -> None:
    data = entry()
    data["gpu_product"], data["node_selector"] = data.pop("gpuProduct"), data.pop("nodeSelector")
    assert Profile.model_validate(data) == profile()


def test_quoted_iso_dates_and_ticket_ids_load() -> None:
    p = profile(
        expires="2027-05-04", qualification={"date": "2026-05-04", "by": "jdoe", "record": "GPU-1234"}
    )
    assert p.expires == date(2027, 5, 4) and p.qualification.record == "GPU-1234"


def test_empty_selector_means_any_node_and_several_profiles_load() -> None:
    profiles = load_profiles_text(dump(entry(nodeSelector=""), entry(name="a100-550", gpuProduct=A100)))
    assert [p.name for p in profiles] == ["h100-550", "a100-550"]
    assert profiles[0].selector.matches({}) and profiles[0].selector.matches({"any": "thing"})


def test_empty_profile_list_loads_and_qualifies_nothing() -> None:
    assert load_profiles_text("profiles: []\n") == []
    assert qualification([], {}, H100, DRIVER, K113, OS, TODAY) == (
        None,
        f"no profile for {H100}, driver {DRIVER}, kernel {K113}, {OS}",
    )


def test_same_name_with_another_version_is_fine() -> None:
    profiles = load_profiles_text(dump(entry(version=1), entry(version=2)))
    assert [p.version for p in profiles] == [1, 2]


def test_profiles_are_frozen() -> None:
    p = profile()
    with pytest.raises(ValueError):
        p.version = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"name": None}, "profiles.0.name: Field required"),
        ({"name": ""}, "profiles.0.name: String should match pattern"),
        ({"name": "h100 550"}, "profiles.0.name: String should match pattern"),
        ({"name": "-h100"}, "profiles.0.name: String should match pattern"),
        ({"version": None}, "profiles.0.version: Field required"),
        ({"version": 0}, "profiles.0.version: Input should be greater than or equal to 1"),
        ({"version": -1}, "profiles.0.version: Input should be greater than or equal to 1"),
        ({"version": "2"}, "profiles.0.version: Input should be a valid integer"),
        ({"version": True}, "profiles.0.version: Input should be a valid integer"),
        ({"version": 1.5}, "profiles.0.version: Input should be a valid integer"),
        ({"owner": None}, "profiles.0.owner: Field required"),
        ({"owner": ""}, "profiles.0.owner: String should have at least 1 character"),
        ({"owner": "   "}, "profiles.0.owner: String should have at least 1 character"),
        ({"qualification": None}, "profiles.0.qualification: Field required"),
        ({"qualification": "GPU-1"}, "profiles.0.qualification: Input should be a valid dictionary"),
        ({"expires": None}, "profiles.0.expires: Field required"),
        ({"expires": "soon"}, "profiles.0.expires: must be a date like 2026-01-31, got 'soon'"),
        ({"expires": "2027-02-30"}, "profiles.0.expires: must be a date like 2026-01-31, got '2027-02-30'"),
        ({"expires": "2027-5-4"}, "profiles.0.expires: must be a date like 2026-01-31"),
        ({"expires": 1_800_000_000}, "profiles.0.expires: must be a date like 2026-01-31, got 1800000000"),
        ({"expires": "2027-05-04T00:00:00"}, "profiles.0.expires: must be a date like 2026-01-31"),
        (
            {"expires": date(2026, 5, 4)},
            "profiles.0: expires 2026-05-04 is not after qualification.date 2026-05-04",
        ),
        (
            {"expires": date(2026, 1, 1)},
            "profiles.0: expires 2026-01-01 is not after qualification.date 2026-05-04",
        ),
        ({"gpuProduct": None}, "profiles.0.gpuProduct: Field required"),
        ({"gpuProduct": ""}, "profiles.0.gpuProduct: must be a GPU product"),
        ({"gpuProduct": "NVIDIA H100 80GB HBM3"}, "profiles.0.gpuProduct: must be a GPU product"),
        ({"gpuProduct": 100}, "profiles.0.gpuProduct: Input should be a valid string"),
        ({"driver": None}, "profiles.0.driver: Field required"),
        (
            {"driver": 550.9},
            'profiles.0.driver: YAML read 550.9 as a number: quote the driver version, like "550.90.07"',
        ),
        ({"driver": 550}, "profiles.0.driver: YAML read 550 as a number"),
        ({"driver": "550"}, "profiles.0.driver: must be a full driver version like 550.90.07, got '550'"),
        ({"driver": "550.90.07.1"}, "profiles.0.driver: must be a full driver version"),
        ({"driver": "r550.90"}, "profiles.0.driver: must be a full driver version"),
        ({"driver": ""}, "profiles.0.driver: must be a full driver version"),
        ({"driver": True}, "profiles.0.driver: Input should be a valid string"),
        ({"kernel": None}, "profiles.0.kernel: Field required"),
        ({"kernel": ""}, "profiles.0.kernel: must be a kernel version like 5.15.0-105-generic, got ''"),
        ({"kernel": "unknown"}, "profiles.0.kernel: must be a kernel version"),
        ({"kernel": "5.15.0 105"}, "profiles.0.kernel: must be a kernel version"),
        ({"kernel": 5.15}, "profiles.0.kernel: Input should be a valid string"),
        ({"os": None}, "profiles.0.os: Field required"),
        ({"os": "ubuntu"}, "profiles.0.os: must be an OS tag like ubuntu22.04 or rhel9.4, got 'ubuntu'"),
        ({"os": "Ubuntu 22.04"}, "profiles.0.os: must be an OS tag"),
        ({"os": ""}, "profiles.0.os: must be an OS tag"),
        ({"nodeSelector": None}, "profiles.0.nodeSelector: Field required"),
        ({"nodeSelector": "pool in (a"}, "profiles.0.nodeSelector: invalid label selector"),
        ({"nodeSelector": "a=b,,c=d"}, "profiles.0.nodeSelector: invalid label selector"),
        ({"nodeSelector": "bad key=x"}, "profiles.0.nodeSelector: invalid label selector"),
        ({"nodeSelector": {"pool": "serve"}}, "profiles.0.nodeSelector: Input should be a valid string"),
        ({"extra": 1}, "profiles.0.extra: unknown key"),
        ({"gpu-product": H100}, "profiles.0.gpu-product: unknown key"),
    ],
)
def test_profile_field_errors(changes: dict[str, Any], expected: str) -> None:
    assert load_error(dump(entry(**changes))).startswith(expected)


@pytest.mark.parametrize(
    ("qualification_record", "expected"),
    [
        ({"by": "jdoe", "record": "GPU-1"}, "profiles.0.qualification.date: Field required"),
        (
            {"date": "yesterday", "by": "jdoe", "record": "GPU-1"},
            "profiles.0.qualification.date: must be a date",
        ),
        ({"date": date(2026, 5, 4), "record": "GPU-1"}, "profiles.0.qualification.by: Field required"),
        (
            {"date": date(2026, 5, 4), "by": " ", "record": "GPU-1"},
            "profiles.0.qualification.by: String should have",
        ),
        ({"date": date(2026, 5, 4), "by": "jdoe"}, "profiles.0.qualification.record: Field required"),
        (
            {"date": date(2026, 5, 4), "by": "jdoe", "record": ""},
            "profiles.0.qualification.record: must be a URL or a ticket id (no spaces)",
        ),
        (
            {"date": date(2026, 5, 4), "by": "jdoe", "record": "see ticket"},
            "profiles.0.qualification.record: must be a URL or a ticket id (no spaces)",
        ),
        (
            {"date": date(2026, 5, 4), "by": "jdoe", "record": "GPU-1", "passed": True},
            "profiles.0.qualification.passed: unknown key",
        ),
    ],
)
def test_qualification_record_errors(qualification_record: dict[str, Any], expected: str) -> None:
    assert load_error(dump(entry(qualification=qualification_record))).startswith(expected)


def test_error_names_the_failing_entry_and_counts_the_rest() -> None:
    message = load_error(dump(entry(), entry(name="b", owner="", os="x")))
    assert message.startswith("profiles.1.")
    assert message.endswith("(and 1 more problems)")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "empty; expected a mapping with a `profiles` list"),
        ("# nothing\n", "empty; expected a mapping with a `profiles` list"),
        ("- a\n- b\n", "expected a mapping with a `profiles` list, got a list"),
        ("just text\n", "expected a mapping with a `profiles` list, got a str"),
        ("profiles: [\n", "not valid YAML at line 2"),
        ("profiles:\n  - name: a\n    version: [1\n", "not valid YAML at line 4"),
        ("profiles:\n\t- name: a\n", "not valid YAML"),
        ("{}\n", "profiles: Field required"),
        ("profiles:\n", "profiles: Input should be a valid list"),
        ("profiles: {name: a}\n", "profiles: Input should be a valid list"),
        ("profiles: [a]\n", "profiles.0: Input should be a valid dictionary"),
        ("profiles: []\nversion: 1\n", "version: unknown key"),
    ],
)
def test_file_errors(text: str, expected: str) -> None:
    assert load_error(text).startswith(expected)


def test_duplicate_name_and_version_is_an_error() -> None:
    text = dump(entry(), entry(name="a100-550", gpuProduct=A100), entry(kernel=K105))
    assert load_error(text) == "profiles.2: duplicate profile h100-550 v2 (also profiles.0)"


def test_default_source_is_named_too() -> None:
    with pytest.raises(ValueError, match=r"^profiles profiles: not valid YAML"):
        load_profiles_text("profiles: [")


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
