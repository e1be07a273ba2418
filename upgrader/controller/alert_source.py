"""Observe for the alert gate: ask Prometheus which alerts fire, once per pass, and hand the core plain
data (core/policy/alert_gate.py decides).

`GET <prometheusURL>/api/v1/alerts`, with the policy's timeout and no retries: the next pass asks
again. Only alerts in state "firing" count (pending ones have not fired yet). Whatever goes wrong is
one line in `AlertReading.error`, "unreachable: <cause>" or "bad answer: <what>", never an exception:
the core fails closed on it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import urllib3

from upgrader.core.model.alerts import Alert, AlertReading
from upgrader.core.policy.alert_gate import AlertGate

ALERTS_PATH = "/api/v1/alerts"
MAX_BYTES = 16 * 1024 * 1024  # a Prometheus with this much firing is not one to trust the answer of
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^\"')\]]+)")
LONGEST = 200


class PrometheusAlerts:
    """One Prometheus, asked with one connection pool across passes."""

    def __init__(self, gate: AlertGate) -> None:
        self.url = gate.prometheus_url + ALERTS_PATH
        self.timeout = float(gate.timeout_seconds)
        self.pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=self.timeout))

    def read(self) -> AlertReading:
        try:
            response = self.pool.request("GET", self.url, preload_content=False, headers={"Accept": "application/json"})
            try:
                body = response.read(MAX_BYTES + 1)
            finally:
                response.release_conn()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return AlertReading(error=f"unreachable: {failure_cause(exc, self.timeout)}")
        if response.status != 200:
            return AlertReading(error=f"bad answer: HTTP {response.status}{_snippet(body)}")
        if len(body) > MAX_BYTES:
            return AlertReading(error=f"bad answer: more than {MAX_BYTES} bytes")
        return parse_alerts(body)


def parse_alerts(body: bytes) -> AlertReading:
    """The firing alerts in an /api/v1/alerts answer, or what is wrong with it."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return AlertReading(error=f"bad answer: not JSON{_snippet(body)}")
    if not isinstance(data, dict) or data.get("status") != "success":
        status = data.get("status") if isinstance(data, dict) else None
        error = data.get("error") if isinstance(data, dict) else None
        return AlertReading(error=f"bad answer: status {status!r}" + (f": {flat_line(str(error))}" if error else ""))
    listed = (data.get("data") or {}).get("alerts") if isinstance(data.get("data"), dict) else None
    if not isinstance(listed, list):
        return AlertReading(error="bad answer: no data.alerts list")
    firing: list[Alert] = []
    for entry in listed:
        labels = entry.get("labels") if isinstance(entry, dict) else None
        if not isinstance(labels, dict) or not isinstance(labels.get("alertname"), str):
            return AlertReading(error="bad answer: an alert without labels.alertname")
        if entry.get("state") != "firing":
            continue
        active = entry.get("activeAt")
        firing.append(
            Alert(
                labels["alertname"],
                {str(k): str(v) for k, v in labels.items()},
                flat_line(active) if isinstance(active, str) else None,
            )
        )
    return AlertReading(tuple(firing))


def failure_cause(exc: BaseException, timeout: float) -> str:
    """`Connection refused`, `timed out after 5s`, `Name or service not known`: the cause, one line."""
    # NewConnectionError is a ConnectTimeoutError to urllib3 (for compatibility), but it is a refusal
    if isinstance(exc, urllib3.exceptions.TimeoutError) and not isinstance(exc, urllib3.exceptions.NewConnectionError):
        return f"timed out after {timeout:g}s"
    reason = getattr(exc, "reason", None)
    text = str(reason if reason is not None else exc)
    if "timed out" in text.lower():
        return f"timed out after {timeout:g}s"
    found = _ERRNO.search(text)
    return flat_line(found.group(1).strip() if found else text)


def _snippet(body: bytes) -> str:
    text = body[:LONGEST].decode("utf-8", "replace").strip()
    return f": {flat_line(text)}" if text else ""


def flat_line(text: str) -> str:
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= LONGEST else flat[: LONGEST - 1] + "…"
