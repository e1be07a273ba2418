"""The alerts as users get them: rendered by kustomize, checked and unit-tested by the real promtool.

`alerts_test.yaml` (promtool's unit-test format) holds each alert to the time its summary states:
firing at that evaluation and not at the one before, silent when it should be, across a leader
handover too, with the exact annotation text. It is copied next to the rendered rule file (promtool
resolves `rule_files` relative to the test file), with RUNBOOK_BASE_URL replaced by the base URL
of deploy/runbook-links.yaml, so the links it expects are the absolute ones users get.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prometheus_tools import ROOT, binary, rendered_deploy, write_rules

DEPLOY = ROOT / "deploy"
LINKS = DEPLOY / "runbook-links.yaml"
UNIT_TESTS = Path(__file__).resolve().parent / "alerts_test.yaml"
PLACEHOLDER = "RUNBOOK_BASE_URL"
ALERTS = {
    "UpgraderRolloutHalted",
    "UpgraderNodeStuckInState",
    "UpgraderNodeUpgradeFailed",
    "UpgraderReconcileErrors",
    "UpgraderNoLeader",
    "UpgraderRolloutObjectMissing",
    "UpgraderNotReconciling",
}
DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def _base_url() -> str:
    return str(yaml.safe_load(LINKS.read_text())["data"]["baseURL"])


def _rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed on this machine")
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=True
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _seconds(text: str) -> int:
    match = DURATION.fullmatch(text)
    assert match and text, f"not a duration: {text!r}"
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def _unit_tests() -> dict[str, Any]:
    return dict(yaml.safe_load(UNIT_TESTS.read_text()))


@pytest.mark.kubectl
def test_promtool_checks_the_rendered_rules(tmp_path: Path) -> None:
    rules = write_rules(tmp_path)
    count = sum(len(g["rules"]) for g in yaml.safe_load(rules.read_text())["groups"])
    out = subprocess.run(
        [binary("promtool"), "check", "rules", str(rules)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout
    # A lint finding (duplicate rules) is printed as FAILED even though the exit code is 0.
    assert f"SUCCESS: {count} rules found" in out.stdout and "FAILED" not in out.stdout, out.stdout
    assert count == len(_rules(rendered_deploy()))


@pytest.mark.kubectl
def test_every_rendered_runbook_url_is_absolute_under_the_base_and_names_a_page() -> None:
    base = _base_url()
    assert base.startswith("https://") and not base.endswith("/"), base
    rules = _rules(rendered_deploy())
    assert {r["alert"] for r in rules} == ALERTS
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("https://") and url.startswith(base + "/"), (rule["alert"], url)
        page = url.removeprefix(base + "/")
        assert "/" not in page and page.endswith(".md"), (rule["alert"], url)
        assert (ROOT / "runbooks" / page).is_file(), f"{rule['alert']}: {url} names no page in runbooks/"


@pytest.mark.kubectl
def test_the_base_url_is_set_in_one_place(tmp_path: Path) -> None:
    """Changing baseURL in runbook-links.yaml, and nothing else, moves every link."""
    old, new = _base_url(), "https://git.example.org/platform/upgrader/-/blob/main/runbooks"
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    text = LINKS.read_text()
    line = f"baseURL: {old}"
    assert text.count(line) == 1, "runbook-links.yaml should set baseURL on one line"
    (copy / LINKS.name).write_text(text.replace(line, f"baseURL: {new}"))

    before = {r["alert"] + r["expr"]: r["annotations"]["runbook_url"] for r in _rules(_kustomize(DEPLOY))}
    docs = _kustomize(copy)
    after = {r["alert"] + r["expr"]: r["annotations"]["runbook_url"] for r in _rules(docs)}
    assert before.keys() == after.keys()
    for key, url in after.items():
        assert url == new + before[key].removeprefix(old), (key, url)
    assert PLACEHOLDER not in yaml.safe_dump_all(docs)
    # The ConfigMap only feeds kustomize (local-config): it is not in what gets applied.
    assert not [d for d in docs if d["metadata"]["name"] == "upgrader-runbook-links"]


@pytest.mark.kubectl
def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    write_rules(tmp_path)
    test_file = tmp_path / UNIT_TESTS.name
    test_file.write_text(UNIT_TESTS.read_text().replace(PLACEHOLDER, _base_url()))
    out = subprocess.run(
        [binary("promtool"), "test", "rules", test_file.name],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
    )
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout


def test_every_alert_is_tested_firing_at_its_time_and_silent_one_evaluation_before() -> None:
    tests = _unit_tests()
    assert tests["rule_files"] == ["upgrader-rules.yaml"]
    step = _seconds(tests["evaluation_interval"])
    on_time: set[str] = set()
    silent: set[str] = set()
    for group in tests["tests"]:
        cases = group.get("alert_rule_test", [])
        empty = {(c["alertname"], _seconds(c["eval_time"])) for c in cases if not c.get("exp_alerts")}
        for case in cases:
            name = case["alertname"]
            assert name in ALERTS, name
            if not case.get("exp_alerts"):
                silent.add(name)
            elif (name, _seconds(case["eval_time"]) - step) in empty:
                on_time.add(name)
    assert on_time == ALERTS, f"no case firing at its time after a silent evaluation: {sorted(ALERTS - on_time)}"
    assert silent == ALERTS


def test_expected_alerts_carry_every_annotation_and_the_runbook_link() -> None:
    """promtool compares annotations exactly; every expectation spells out all three."""
    seen = 0
    for group in _unit_tests()["tests"]:
        for case in group.get("alert_rule_test", []):
            for alert in case.get("exp_alerts", []):
                seen += 1
                annotations = alert["exp_annotations"]
                assert set(annotations) == {"summary", "description", "runbook_url"}, case
                assert annotations["runbook_url"].startswith(PLACEHOLDER + "/"), case
                page = annotations["runbook_url"].removeprefix(PLACEHOLDER + "/")
                assert (ROOT / "runbooks" / page).is_file(), page
                assert "{{" not in annotations["summary"] + annotations["description"], case
    assert seen >= len(ALERTS)


def test_input_series_are_labelled_as_a_service_monitor_scrapes_them() -> None:
    for group in _unit_tests()["tests"]:
        for series in group["input_series"]:
            name = series["series"].split("{", 1)[0]
            if name.startswith("upgrader_"):
                for label in ("namespace", "job", "instance"):
                    assert f"{label}=" in series["series"], series["series"]


def _squash(text: str) -> str:
    """Whitespace-insensitive PromQL and prose: runs of blanks as one space, none inside brackets."""
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r"([(\[{]) | ([)\]}])", r"\1\2", text)


def _promql_blocks(text: str) -> list[str]:
    return re.findall(r"^```promql\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


@pytest.mark.kubectl
def test_each_alert_page_quotes_its_expressions_and_summary_as_they_are() -> None:
    for rule in _rules(rendered_deploy()):
        page = ROOT / "runbooks" / rule["annotations"]["runbook_url"].rsplit("/", 1)[1]
        text = page.read_text(encoding="utf-8")
        seen = text.split("## What you see", 1)[1].split("\n## ", 1)[0]
        assert f"`{rule['alert']}`" in seen, f"{page.name} does not name {rule['alert']} under 'What you see'"
        quoted = {_squash(block) for block in _promql_blocks(seen)}
        assert _squash(rule["expr"]) in quoted, f"{page.name} does not quote the expression of {rule['alert']}"
        summary = re.sub(r"\{\{ \$labels\.(\w+) \}\}", r"<\1>", rule["annotations"]["summary"])
        assert summary in seen, f"{page.name} does not quote the summary {summary!r}"
        if "for" in rule:
            assert f"`for: {rule['for']}`" in seen, f"{page.name} does not say {rule['alert']} waits {rule['for']}"


@pytest.mark.kubectl
def test_every_expression_a_runbook_quotes_is_a_rule_s() -> None:
    expressions = {_squash(r["expr"]) for r in _rules(rendered_deploy())}
    for page in sorted((ROOT / "runbooks").glob("*.md")):
        for block in _promql_blocks(page.read_text(encoding="utf-8")):
            assert _squash(block) in expressions, f"{page.name} quotes an expression no rule has: {block}"
