"""What an Event created through events.k8s.io/v1 must pass, as kube-apiserver checks it.

kube-apiserver's ValidateEventCreate (pkg/apis/core/validation/events.go): the legacy rules every
Event passes, then the strict ones for this group only (an `eventTime`, a `Normal` or `Warning`
type, no deprecated fields). Field paths are the internal (core) names the server reports; the
answer is a 422 Invalid naming `Event.events.k8s.io`, one cause per broken rule.
"""

from __future__ import annotations

from typing import Any

from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.validation import go_quote, key_messages

Obj = dict[str, Any]
Cause = tuple[str, str, str]  # (field, reason, message)
LENGTH_LIMITS = (("reportingInstance", "reportingInstance", 128), ("action", "action", 128), ("reason", "reason", 128))
NOTE_LIMIT = 1024
DEPRECATED = (
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)


def _required(field: str) -> Cause:
    return (field, "FieldValueRequired", "Required value")


def _invalid(field: str, value: str, detail: str) -> Cause:
    return (field, "FieldValueInvalid", f"Invalid value: {go_quote(value)}: {detail}")


def _regarding_namespace(event: Obj, namespace: str) -> list[Cause]:
    """The Event's namespace must be its object's (or default/kube-system for a cluster-scoped one)."""
    regarding = str((event.get("regarding") or {}).get("namespace") or "")
    if event.get("eventTime"):
        fits = bool(regarding) or namespace in ("default", "kube-system")
    else:
        fits = namespace == regarding if regarding else namespace in ("", "default")
    return [] if fits else [_invalid("involvedObject.namespace", regarding, "does not match event.namespace")]


def _reporting(event: Obj) -> list[Cause]:
    """Who reported it, what was done and why: required of an Event with an eventTime."""
    controller = str(event.get("reportingController") or "")
    causes = [] if controller else [_required("reportingController")]
    causes += [_invalid("reportingController", controller, why) for why in key_messages(controller)]
    for view_field, field, limit in LENGTH_LIMITS:
        value = str(event.get(view_field) or "")
        if not value:
            causes.append(_required(field))
        elif len(value) > limit:
            causes.append(_invalid(field, "", f"can have at most {limit} characters"))
    if len(str(event.get("note") or "")) > NOTE_LIMIT:
        causes.append(_invalid("message", "", f"can have at most {NOTE_LIMIT} characters"))
    return causes


def _series(event: Obj) -> list[Cause]:
    series = event.get("series")
    if not isinstance(series, dict):
        return []
    causes = [] if int(series.get("count") or 0) >= 2 else [_invalid("series.count", "", "should be at least 2")]
    if not series.get("lastObservedTime"):
        causes.append(_required("series.lastObservedTime"))
    return causes


def _strict(event: Obj) -> list[Cause]:
    """The rules for this group only: what a new Event must say, and no deprecated core fields."""
    causes = _series(event)
    if not event.get("eventTime"):
        causes.append(_required("eventTime"))
    kind = str(event.get("type") or "")
    if kind not in ("Normal", "Warning"):
        causes.append(_invalid("type", "", f"has invalid value: {kind}"))
    causes += [_invalid(core, "", "needs to be unset") for view, core in DEPRECATED if event.get(view)]
    source = event.get("deprecatedSource") or {}
    if isinstance(source, dict) and (source.get("component") or source.get("host")):
        causes.append(_invalid("source", "", "needs to be unset"))
    return causes


def check_create(event: Obj, namespace: str) -> None:
    """Refuse an events.k8s.io/v1 Event a real API server would refuse to create (422 Invalid)."""
    causes = _regarding_namespace(event, namespace)
    if event.get("eventTime"):
        causes += _reporting(event)
    causes += _strict(event)
    if causes:
        raise invalid(str((event.get("metadata") or {}).get("name") or ""), causes)


def invalid(name: str, causes: list[Cause]) -> errors.ApiError:
    """NewInvalid for Event.events.k8s.io: the message lists each field error, the details carry them."""
    lines = [f"{field}: {message}" for field, _, message in causes]
    listed = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    details: Obj = {
        "name": name,
        "group": "events.k8s.io",
        "kind": "Event",
        "causes": [{"reason": reason, "message": message, "field": field} for field, reason, message in causes],
    }
    return errors.ApiError(422, f'Event.events.k8s.io "{name}" is invalid: {listed}', details=details)
