"""Alert gating: no node starts while a Prometheus alert the policy names fires, nor while Prometheus
cannot say whether one does (fail closed). Nodes already in progress finish.

The controller asks Prometheus's alerts API once per pass (upgrader/controller/alert_source.py) and hands the
snapshot an `AlertReading`: the firing alerts, or why it could not read them. This module only
decides, from that plain data.

The matching rule: an alert matches when its name (`alertname`) is listed in `alerts`, OR when the
gate has `matchers` and every one of them fully matches (Python `re.fullmatch`, anchored as in
PromQL) the value of its label on the alert (a label the alert lacks reads as ""). At least one of
`alerts` and `matchers` must be given; to gate on every firing alert, match `alertname` with `.+`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from upgrader.core.model.alerts import Alert, AlertReading
from upgrader.core.report.entries import GateReport
from upgrader.core.report.kinds import WaitReason

RUNBOOK = WaitReason.ALERT_FIRING.runbook
NAMED = 5  # alerts a sentence names before "and N more"
SHOWN_LABELS = ("severity", "namespace")  # shown besides the labels the matchers name
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class AlertMatcher(_Strict):
    label: str
    regex: str

    @field_validator("label")
    @classmethod
    def _label(cls, value: str) -> str:
        if not _LABEL_NAME.match(value):
            raise ValueError(f"not a Prometheus label name: {value!r}")
        return value

    @field_validator("regex")
    @classmethod
    def _regex(cls, value: str) -> str:
        if len(value) > 1024:
            raise ValueError("must be at most 1024 characters")
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression {value!r}: {exc}") from None
        return value

    def matches(self, labels: Mapping[str, str]) -> bool:
        return re.fullmatch(self.regex, labels.get(self.label, "")) is not None


class AlertGate(_Strict):
    """`alertGate` in the policy: no node starts while a matching alert fires (docs/policy.md)."""

    prometheus_url: str = Field(alias="prometheusURL")
    alerts: tuple[str, ...] = ()
    matchers: tuple[AlertMatcher, ...] = ()
    timeout_seconds: int = Field(5, alias="timeoutSeconds", ge=1, le=60, strict=True)

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc or not value.isprintable():
            raise ValueError(f"must be an http(s) URL like http://prometheus.monitoring:9090, got {value!r}")
        if parts.query or parts.fragment:
            raise ValueError(f"must not carry a query or fragment, got {value!r}")
        return value.rstrip("/")

    @field_validator("alerts")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or not name.isprintable() or len(name) > 253:
                raise ValueError(f"not an alert name: {name!r}")
        return value

    @model_validator(mode="after")
    def _something(self) -> AlertGate:
        if not self.alerts and not self.matchers:
            raise ValueError(
                "needs alerts (names) or matchers; to gate on every firing alert, use "
                "matchers: [{label: alertname, regex: '.+'}]"
            )
        return self

    def matches(self, alert: Alert) -> bool:
        if alert.name in self.alerts:
            return True
        labels = {**alert.labels, "alertname": alert.name}
        return bool(self.matchers) and all(m.matches(labels) for m in self.matchers)

    def key_labels(self) -> tuple[str, ...]:
        """The labels a description shows: those the matchers name, then severity and namespace."""
        keys = [m.label for m in self.matchers] + list(SHOWN_LABELS)
        return tuple(dict.fromkeys(k for k in keys if k != "alertname"))


@dataclass(frozen=True)
class GateVerdict:
    """Whether the gate lets nodes start now; `url` is empty when the policy sets no gate."""

    open: bool
    reason: WaitReason | None = None  # ALERT_FIRING or ALERT_GATE_UNAVAILABLE when closed
    alerts: tuple[str, ...] = ()  # the matching firing alerts, described (Alert.describe)
    error: str | None = None
    url: str = ""

    def report(self) -> GateReport:
        return GateReport(self.open, self.url, self.alerts, self.error)


GATE_OPEN = GateVerdict(True)


def gate_verdict(gate: AlertGate | None, reading: AlertReading | None) -> GateVerdict:
    """The gate's answer for this pass. No gate: open. No reading, or an error: closed (fail closed)."""
    if gate is None:
        return GATE_OPEN
    url = gate.prometheus_url
    if reading is None or reading.error is not None:
        error = "not asked this pass" if reading is None else reading.error
        return GateVerdict(False, WaitReason.ALERT_GATE_UNAVAILABLE, error=error, url=url)
    keys = gate.key_labels()
    firing = sorted({a.describe(keys) for a in reading.firing if gate.matches(a)})
    if firing:
        return GateVerdict(False, WaitReason.ALERT_FIRING, tuple(firing), url=url)
    return GateVerdict(True, url=url)


def closed_text(verdict: GateVerdict) -> str:
    """The sentence a closed gate's wait says: status message, Event and log line."""
    if verdict.reason is WaitReason.ALERT_FIRING:
        named = list(verdict.alerts[:NAMED])
        more = len(verdict.alerts) - len(named)
        listing = ", ".join(named) + (f" and {more} more" if more else "")
        one = len(verdict.alerts) == 1
        return (
            f"alert gate: {listing} {'is' if one else 'are'} firing in Prometheus {verdict.url}; "
            f"nodes in progress finish, none starts until {'it resolves' if one else 'they resolve'}; "
            f"see {RUNBOOK}"
        )
    return (
        f"alert gate: cannot read alerts from Prometheus {verdict.url} ({verdict.error}); "
        f"nodes in progress finish, none starts until it answers (fail closed); see {RUNBOOK}"
    )
