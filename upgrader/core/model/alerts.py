"""What the controller read from Prometheus's alerts API in a pass, as plain data: the firing alerts,
or why it could not tell. The alert gate (core/policy/alert_gate.py) judges starts by it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Alert:
    """A firing alert as Prometheus lists it: its name, labels and since when it is active."""

    name: str
    labels: Mapping[str, str]
    active_at: str | None = None

    def describe(self, keys: Sequence[str]) -> str:
        """`Name{key="value", ...} since <activeAt>`, with only the labels `keys` names."""
        shown = [f'{k}="{self.labels[k]}"' for k in keys if k != "alertname" and k in self.labels]
        labels = "{" + ", ".join(shown) + "}" if shown else ""
        return f"{self.name}{labels}" + (f" since {self.active_at}" if self.active_at else "")


@dataclass(frozen=True)
class AlertReading:
    """What the controller read from Prometheus this pass: the firing alerts, or `error` (one line,
    "unreachable: <cause>" or "bad answer: <what>") when it could not tell."""

    firing: tuple[Alert, ...] = ()
    error: str | None = None
