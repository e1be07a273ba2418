"""The upgrade policy's refusals: one-line errors naming the field for bad files, label keys and failure
domains as Kubernetes validates them, and size and nesting bounds. Defaults: test_policy_defaults.py."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pytest_mock import MockerFixture

from upgrader.controller.settings import load_policy
from upgrader.core.model.input_errors import one_line
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.inputs import ConfigError

from .policy_fixtures import load_error, write

# ----- bad input: one line naming the field ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("maxParallel: 3\n", "maxParallel: unknown key"),
        ("drain:\n  enabled: true\n", "drain.enabled: unknown key"),
        ("upgradePolicy:\n  drain:\n    enabled: true\n", "drain.enabled: unknown key"),
        ("maxParallelUpgrades: many\n", "maxParallelUpgrades: Input should be a valid integer"),
        ("maxParallelUpgrades: -1\n", "maxParallelUpgrades: Input should be greater than or equal to 0"),
        ("drain:\n  enable: maybe\n", "drain.enable: Input should be a valid boolean"),
        ("drain: true\n", "drain: Input should be a valid dictionary or instance of Drain"),
        ("drain:\n  timeoutSeconds: 1.5\n", "drain.timeoutSeconds: Input should be a valid integer"),
        (
            "gpuPodDeletion:\n  timeoutSeconds: -1\n",
            "gpuPodDeletion.timeoutSeconds: Input should be greater than or equal to 0",
        ),
        (
            "podDeletion:\n  timeoutSeconds: -5\n",
            "podDeletion.timeoutSeconds: Input should be greater than or equal to 0",
        ),
        (
            "waitForCompletion:\n  timeoutSeconds: -1\n",
            "waitForCompletion.timeoutSeconds: Input should be greater than or equal to 0",
        ),
        (
            "drain:\n  timeoutSeconds: -300\n",
            "drain.timeoutSeconds: Input should be greater than or equal to 0",
        ),
        (
            "validation:\n  timeoutSeconds: 0\n",
            "validation.timeoutSeconds: Input should be greater than or equal to 1",
        ),
        (
            "maxUnavailable: abc\n",
            "maxUnavailable: must be a number of nodes or a percentage like \"25%\", got 'abc'",
        ),
        ("maxUnavailable: 150%\n", "maxUnavailable: percentage must be between 0% and 100%, got 150%"),
        ("maxUnavailable: -2\n", "maxUnavailable: must not be negative, got -2"),
        ("drainEveryNode: true\n", "drainEveryNode: needs drain.enable: true (the drain's podSelector, force, "
         "deleteEmptyDir and timeoutSeconds come from drain)"),
        (
            "maxUnavailable: 1.5\n",
            'maxUnavailable: must be a number of nodes or a percentage like "25%", got 1.5',
        ),
        ("maxUnavailable: true\n", 'maxUnavailable: must be a number of nodes or a percentage like "25%"'),
        (
            "maxUnavailable: 25 %\n",
            "maxUnavailable: must be a number of nodes or a percentage like \"25%\", got '25 %'",
        ),
        (
            "waitForCompletion:\n  podSelector: 'app in (a'\n",
            "waitForCompletion.podSelector: invalid label selector 'app in (a': cannot parse 'app in (a'",
        ),
        (
            "drain:\n  podSelector: a=b=c\n",
            "drain.podSelector: invalid label selector 'a=b=c': cannot parse 'a=b=c'",
        ),
        (
            "validation:\n  podSelector: 'app=,'\n",
            "validation.podSelector: invalid label selector 'app=,': empty requirement",
        ),
        ("onBlockedTimeout: explode\n", "onBlockedTimeout: Input should be 'halt' or 'fail'"),
        ("onNodeFailure: ignore\n", "onNodeFailure: Input should be 'halt' or 'continue'"),
        (
            "failureDomains:\n  order: [a, b, a]\n",
            "failureDomains.order: lists a domain twice: a",
        ),
        (
            "failureDomains:\n  soakSeconds: -60\n",
            "failureDomains.soakSeconds: Input should be greater than or equal to 0",
        ),
        (
            "failureDomains:\n  labelKey: ''\n",
            "failureDomains.labelKey: not a valid label key '': name part must be non-empty",
        ),
        ("maxParallelUpgrades: [1\n", "not valid YAML at line 2"),
        ("drain:\n\tenable: true\n", "not valid YAML at line 2"),
        ("- maxParallelUpgrades: 1\n", "policy must be a mapping of upgradePolicy keys, got list"),
        ("just a string\n", "policy must be a mapping of upgradePolicy keys, got str"),
        (
            "upgradePolicy:\n  - maxParallelUpgrades: 1\n",
            "upgradePolicy: must be a mapping, got list",
        ),
        (
            "maxParallelUpgrades: -1\nfoo: 1\n",
            "maxParallelUpgrades: Input should be greater than or equal to 0 (and 1 more problems)",
        ),
    ],
)
def test_bad_policy_is_one_line_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    assert load_error(tmp_path, text) == message


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("maxParallelUpgrades: true\n", "maxParallelUpgrades"),
        ("gpuPodDeletion:\n  timeoutSeconds: true\n", "gpuPodDeletion.timeoutSeconds"),
        ("waitForCompletion:\n  timeoutSeconds: false\n", "waitForCompletion.timeoutSeconds"),
        ("drain:\n  enable: 1\n", "drain.enable"),
        ("gpuPodDeletion:\n  force: 'yes please'\n", "gpuPodDeletion.force"),
        ("gpuPodDeletion:\n  deleteEmptyDir: 'true'\n", "gpuPodDeletion.deleteEmptyDir"),
        ("podRestart:\n  timeoutSeconds: '600'\n", "podRestart.timeoutSeconds"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_not_coerced(tmp_path: Path, text: str, field: str) -> None:
    # `timeoutSeconds: false` must not quietly become 0 (wait forever), nor `true` one second.
    assert load_error(tmp_path, text).startswith(f"{field}: Input should be a valid ")


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"^policy .*nope\.yaml: no such file$"):
        load_policy(path)


def test_a_directory_is_not_a_policy_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r": is a directory, expected a YAML file$"):
        load_policy(str(tmp_path))


def test_a_file_that_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(ConfigError) as err:
        load_policy(str(path))
    assert str(err.value) == f"policy {path}: not UTF-8 text, so not a YAML policy"


def test_an_unreadable_file_is_a_config_error(tmp_path: Path, mocker: MockerFixture) -> None:
    path = write(tmp_path, "maxParallelUpgrades: 2\n")
    mocker.patch("upgrader.inputs.open", create=True, side_effect=PermissionError(13, "Permission denied", path))
    with pytest.raises(ConfigError) as err:
        load_policy(path)
    assert str(err.value) == f"policy {path}: cannot read: Permission denied"


@pytest.mark.parametrize(
    "key",
    ['"bad\\nkey"', '"tab\\there"', '"line\\u2028sep"', '"cr\\rlf"'],
)
def test_an_unknown_key_with_a_line_break_still_gives_one_line(tmp_path: Path, key: str) -> None:
    message = load_error(tmp_path, f"{key}: 1\n")
    assert message.endswith(": unknown key")


# ----- label keys and failure domains, as Kubernetes validates labels ---------------------------------

NAME_RULE = "must consist of letters, digits, '-', '_' or '.', and start and end with a letter or digit"


@pytest.mark.parametrize("key", ["topology.kubernetes.io/zone", "zone", "example.com/Rack_1", "a" * 63,
                                 "a" * 253 + "/" + "b" * 63, "1.2/x-y.z"])
def test_a_valid_label_key_is_accepted(key: str) -> None:
    assert policy_from_mapping({"failureDomains": {"labelKey": key}}).failure_domains.label_key == key


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("Zone Key", f"name part {NAME_RULE}"),
        ("-bad", f"name part {NAME_RULE}"),
        ("zone-", f"name part {NAME_RULE}"),
        ("a/b/c", "must be a name with an optional DNS subdomain prefix and one '/' (e.g. 'example.com/zone')"),
        ("z" * 64, "name part must be no more than 63 characters"),
        ("example.com/", "name part must be non-empty"),
        ("/zone", "prefix part must be non-empty"),
        ("a" * 254 + "/zone", "prefix part must be no more than 253 characters"),
        ("Example.com/zone", "prefix part must be a DNS subdomain: lower-case letters, digits, '-' or '.', "
                             "each dot-separated part starting and ending with a letter or digit"),
        ("a..b/zone", "prefix part must be a DNS subdomain: lower-case letters, digits, '-' or '.', "
                      "each dot-separated part starting and ending with a letter or digit"),
    ],
)
def test_an_invalid_label_key_is_refused_naming_the_rule(tmp_path: Path, key: str, problem: str) -> None:
    text = yaml.safe_dump({"failureDomains": {"labelKey": key}})
    assert load_error(tmp_path, text) == f"failureDomains.labelKey: not a valid label key {key!r}: {problem}"


@pytest.mark.parametrize(
    ("domains", "message"),
    [
        ({"order": ["us-east-1a", "us east"]},
         f"failureDomains.order.1: not a valid label value 'us east': must be empty or {NAME_RULE[5:]}"),
        ({"canary": "z" * 64},
         f"failureDomains.canary: not a valid label value '{'z' * 64}': must be no more than 63 characters"),
    ],
)
def test_a_failure_domain_no_node_label_can_hold_is_refused(tmp_path: Path, domains: dict[str, Any],
                                                            message: str) -> None:
    assert load_error(tmp_path, yaml.safe_dump({"failureDomains": domains})) == message


def test_a_long_order_with_a_duplicate_is_refused_quickly() -> None:
    # 100,000 domains (what fits in a 1 MiB policy): the duplicate check was quadratic, minutes long.
    order = [f"z{i}" for i in range(100_000)] + ["z7"]
    with pytest.raises(ValidationError) as err:
        policy_from_mapping({"failureDomains": {"order": order}})
    assert one_line(err.value, "policy") == "policy: failureDomains.order: lists a domain twice: z7"


def test_a_selector_key_a_label_cannot_have_is_refused(tmp_path: Path) -> None:
    assert load_error(tmp_path, "drain:\n  podSelector: a..b/app=x\n") == (
        "drain.podSelector: invalid label selector 'a..b/app=x': label key 'a..b/app': prefix part must be a "
        "DNS subdomain: lower-case letters, digits, '-' or '.', each dot-separated part starting and ending "
        "with a letter or digit"
    )


# ----- bounds: size and nesting ----------------------------------------------------------------------


def test_a_policy_larger_than_1_mib_is_refused_unparsed(tmp_path: Path) -> None:
    text = "#" * 2**20 + "\n"
    assert load_error(tmp_path, text) == "larger than the limit of 1 MiB (1,048,577 bytes)"


def test_a_policy_at_the_bound_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "maxParallelUpgrades: 2\n"
    monkeypatch.setattr("upgrader.controller.settings.POLICY_MAX_BYTES", len(text))
    assert load_policy(write(tmp_path, text)).max_parallel_upgrades == 2
    monkeypatch.setattr("upgrader.controller.settings.POLICY_MAX_BYTES", len(text) - 1)
    assert load_error(tmp_path, text) == f"larger than the limit of {len(text) - 1} bytes ({len(text)} bytes)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("drain: " + "[" * 10**6 + "\n", "nested deeper than 64 levels at line 1"),
        ("failureDomains:\n  order: " + "{a: " * 1000 + "}" * 1000 + "\n", "nested deeper than 64 levels at line 2"),
        ("".join("  " * i + "a:\n" for i in range(100)), "nested deeper than 64 levels at line 64"),
    ],
    ids=["a-million-brackets", "flow-maps", "block-maps"],
)
def test_a_deeply_nested_policy_is_one_line_not_a_recursion_error(tmp_path: Path, text: str, message: str) -> None:
    assert load_error(tmp_path, text) == message


# ----- property: any mapping either loads or is refused in one line ----------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["25%", "0%", "101%", "app=x", "app in (", "halt", "fail"]),
)
_keys = st.one_of(
    st.sampled_from(
        [
            "maxParallelUpgrades",
            "maxUnavailable",
            "autoUpgrade",
            "drain",
            "podDeletion",
            "gpuPodDeletion",
            "waitForCompletion",
            "failureDomains",
            "timeoutSeconds",
            "force",
            "enable",
            "podSelector",
            "order",
            "canary",
            "onBlockedTimeout",
            "upgradePolicy",
        ]
    ),
    st.text(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _values, max_size=5))
def test_any_mapping_loads_or_is_refused_in_one_line(data: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.yaml"
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
        try:
            loaded = load_policy(str(path))
        except ConfigError as exc:
            assert len(str(exc).splitlines()) == 1, str(exc)
            assert str(exc).startswith(f"policy {path}: ")
        else:
            assert isinstance(loaded, Policy)
