"""The Grafana dashboard and the PrometheusRule only use metrics the code exports, and alerts link runbooks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from upgrader.controller.metrics import Metrics
from upgrader.core.report.document import RolloutStatus
from upgrader.core.report.kinds import Phase

from .promql import exported_names, metric_names

ROOT = Path(__file__).resolve().parent.parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "upgrader-dashboard.json"
RULES = ROOT / "deploy" / "prometheusrule.yaml"


def _leader() -> Metrics:
    """A replica that leads and has computed a status: it exports every series, rollout gauges included."""
    metrics = Metrics()
    metrics.rollout.update(RolloutStatus(Phase.RUNNING, "rolling"))
    return metrics


EXPORTED = exported_names(_leader().registry)


def _targets(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for panel in dashboard["panels"] for t in panel.get("targets", [])]


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["spec"]["groups"] for rule in group["rules"]]


def test_the_checker_catches_an_unknown_metric() -> None:
    assert metric_names('sum by (state) (rate(upgrader_nope_total{a="b"}[5m])) / on(x) vector(1)') == {
        "upgrader_nope_total"
    }
    assert "upgrader_nope_total" not in EXPORTED and "upgrader_nodes" in EXPORTED


def test_dashboard_has_a_stable_uid_and_a_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "upgrader-rollout"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_dashboard_shows_what_operators_need() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    titles = {p["title"]: p for p in dashboard["panels"]}
    stacked = titles["Nodes per stage"]
    assert stacked["type"] == "timeseries"
    assert stacked["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert titles["Nodes per stage now"]["type"] == "bargauge"
    for title in (
        "Rollout phase",
        "Blocked and failed nodes",
        "Progress per failure domain",
        "Time in stage (p50 / p90 / p99)",
        "Reconcile passes and errors",
    ):
        assert title in titles


@pytest.mark.parametrize("expr", [t["expr"] for t in _targets(json.loads(DASHBOARD.read_text()))])
def test_dashboard_queries_name_only_exported_metrics(expr: str) -> None:
    used = metric_names(expr)
    assert used, expr
    assert used <= EXPORTED, f"{expr}: unknown {sorted(used - EXPORTED)}"


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r["alert"])
def test_alerts_use_exported_metrics_and_link_an_existing_runbook(rule: dict[str, Any]) -> None:
    used = metric_names(rule["expr"])
    assert used and used <= EXPORTED, f"{rule['expr']}: unknown {sorted(used - EXPORTED)}"
    url = rule["annotations"]["runbook_url"]  # kustomize puts the base URL in (test_alert_rules.py)
    assert url.startswith("RUNBOOK_BASE_URL/") and (ROOT / "runbooks" / url.split("/", 1)[1]).is_file(), url


def test_the_alerts_cover_every_way_a_rollout_stops() -> None:
    assert {r["alert"] for r in _rules()} == {
        "UpgraderRolloutHalted",
        "UpgraderNodeStuckInState",
        "UpgraderNodeUpgradeFailed",
        "UpgraderReconcileErrors",
        "UpgraderNotReconciling",
        "UpgraderNoLeader",
        "UpgraderRolloutObjectMissing",
    }
