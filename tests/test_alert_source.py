"""The alert gate's observe adapter against a tiny local HTTP server: what it asks, what it makes of
each answer (firing alerts only; a 500, garbage or a closed port is one line the core fails closed on)."""

from __future__ import annotations

import json

import pytest

from upgrader.controller.alert_source import PrometheusAlerts, parse_alerts
from upgrader.core.model.alerts import Alert, AlertReading
from upgrader.core.policy.alert_gate import AlertGate

from .conftest import ACTIVE, FakePrometheus, alert, answer, free_port


def source(url: str, timeout: int = 5) -> PrometheusAlerts:
    gate = {"prometheusURL": url, "alerts": ["X"], "timeoutSeconds": timeout}
    return PrometheusAlerts(AlertGate.model_validate(gate))


def test_only_firing_alerts_count(prometheus: FakePrometheus) -> None:
    prometheus.serve(answer(
        alert("GPUServingSLOBurn", "firing", severity="critical"),
        alert("NodeDiskFull", "pending", severity="warning"),
    ))
    reading = source(prometheus.url + "/").read()
    assert reading == AlertReading(
        (Alert("GPUServingSLOBurn", {"alertname": "GPUServingSLOBurn", "severity": "critical"}, ACTIVE),)
    )
    assert prometheus.requests == ["/api/v1/alerts"]


def test_resolved_alerts_leave_an_empty_list_and_each_read_asks_once(prometheus: FakePrometheus) -> None:
    alerts = source(prometheus.url)
    prometheus.serve(answer(alert("GPUServingSLOBurn", "firing")))
    assert len(alerts.read().firing) == 1
    prometheus.serve(answer())  # resolved: Prometheus lists it no more
    assert alerts.read() == AlertReading(())
    assert prometheus.requests == ["/api/v1/alerts"] * 2


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (500, b"internal error", "bad answer: HTTP 500: internal error"),
        (503, b"", "bad answer: HTTP 503"),
        (200, b"<html>login</html>", "bad answer: not JSON: <html>login</html>"),
        (200, b'{"status": "error", "errorType": "bad_data", "error": "x"}', "bad answer: status 'error': x"),
        (200, b'{"status": "success", "data": {}}', "bad answer: no data.alerts list"),
        (200, b'{"status": "success", "data": {"alerts": [{"state": "firing"}]}}',
         "bad answer: an alert without labels.alertname"),
        (200, b"[1, 2]", "bad answer: status None"),
    ],
)
def test_a_bad_answer_is_one_line_and_no_retry(
    prometheus: FakePrometheus, status: int, body: bytes, error: str
) -> None:
    prometheus.serve(body, status)
    assert source(prometheus.url).read() == AlertReading(error=error)
    assert prometheus.requests == ["/api/v1/alerts"]  # the next pass asks again, not this one


def test_a_closed_port_is_unreachable() -> None:
    assert source(f"http://127.0.0.1:{free_port()}").read() == AlertReading(error="unreachable: Connection refused")


def test_a_prometheus_that_never_answers_times_out_within_the_policy_timeout(silent_server: str) -> None:
    assert source(silent_server, timeout=1).read() == AlertReading(error="unreachable: timed out after 1s")


def test_parse_keeps_label_values_as_text() -> None:
    body = json.dumps(answer({"labels": {"alertname": "A", "code": 500}, "state": "firing"})).encode()
    assert parse_alerts(body) == AlertReading((Alert("A", {"alertname": "A", "code": "500"}, None),))
