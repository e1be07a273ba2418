"""Compatibility profiles (docs/compatibility.md#compatibility-profiles), loading: the file format, every
field's check and one-line errors for bad files. Which profile qualifies a node: test_profiles_qualification.py."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from upgrader.core.compat.profiles import Profile, load_profiles_text, qualification

from .profiles_fixtures import A100, DRIVER, H100, K105, K113, OS, P5, SOURCE, TODAY, dump, entry, profile


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
