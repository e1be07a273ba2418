"""Label keys and values, checked as the Kubernetes API server checks them (IsQualifiedName,
IsValidLabelValue): None for good input, else the rule broken, in one line."""

from __future__ import annotations

import pytest

from upgrader.core.model.labels import label_key_error, label_value_error

NAME_RULE = "must consist of letters, digits, '-', '_' or '.', and start and end with a letter or digit"
PREFIX_RULE = (
    "prefix part must be a DNS subdomain: lower-case letters, digits, '-' or '.', "
    "each dot-separated part starting and ending with a letter or digit"
)


@pytest.mark.parametrize(
    "key",
    [
        "zone",
        "topology.kubernetes.io/zone",
        "nvidia.com/gpu-driver-upgrade-state",
        "Zone_1.a-b",
        "a" * 63,
        "x",
        "9",
        "a" * 253 + "/" + "b" * 63,
        "a-b.c-d/e",
    ],
)
def test_keys_kubernetes_accepts(key: str) -> None:
    assert label_key_error(key) is None


@pytest.mark.parametrize(
    ("key", "error"),
    [
        ("", "name part must be non-empty"),
        ("Zone Key", f"name part {NAME_RULE}"),
        ("-bad", f"name part {NAME_RULE}"),
        ("bad_", f"name part {NAME_RULE}"),
        ("zone\n", f"name part {NAME_RULE}"),  # `$` in a regex would let the newline through
        ("a" * 64, "name part must be no more than 63 characters"),
        ("a/b/c", "must be a name with an optional DNS subdomain prefix and one '/' (e.g. 'example.com/zone')"),
        ("/zone", "prefix part must be non-empty"),
        ("example.com/", "name part must be non-empty"),
        ("a" * 254 + "/zone", "prefix part must be no more than 253 characters"),
        ("Example.com/zone", PREFIX_RULE),
        ("a..b/zone", PREFIX_RULE),
        ("a.-b/zone", PREFIX_RULE),
        ("a_b/zone", PREFIX_RULE),
    ],
)
def test_keys_kubernetes_refuses(key: str, error: str) -> None:
    assert label_key_error(key) == error


@pytest.mark.parametrize("value", ["", "us-east-1a", "A", "v1.2_3", "z" * 63])
def test_values_kubernetes_accepts(value: str) -> None:
    assert label_value_error(value) is None


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("z" * 64, "must be no more than 63 characters"),
        ("us east", f"must be empty or {NAME_RULE.removeprefix('must ')}"),
        ("-a", f"must be empty or {NAME_RULE.removeprefix('must ')}"),
        ("a/b", f"must be empty or {NAME_RULE.removeprefix('must ')}"),
        ("a\n", f"must be empty or {NAME_RULE.removeprefix('must ')}"),
    ],
)
def test_values_kubernetes_refuses(value: str, error: str) -> None:
    assert label_value_error(value) == error
