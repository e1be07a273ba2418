"""events.k8s.io/v1 Events: a second view of the core/v1 Events the store holds.

kube-apiserver keeps one Event object and serves it in both groups, converting on the way in and out
(k8s.io/kubernetes pkg/apis/events/v1/conversion.go): `regarding` is core's `involvedObject`, `note`
its `message`, `reportingController` its `reportingComponent`, and core's `source`, timestamps and
`count` come back as `deprecated*`. So the emulator stores core Events only and converts here: one
name, uid and resourceVersion whichever group wrote the Event and whichever reads it.
`EventsV1View` offers the store's object verbs for the dispatcher; `event_checks` holds what a
create through this group must pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from upgrader.core.model.selectors import SelectorError, parse_field_selector
from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.event_checks import check_create
from upgrader.sim.apiserver.listing import ListResult
from upgrader.sim.apiserver.patch import apply_patch
from upgrader.sim.apiserver.registry import ResourceType
from upgrader.sim.apiserver.watch import Watcher

if TYPE_CHECKING:
    from upgrader.sim.apiserver.store import Store

Obj = dict[str, Any]
GROUP = "events.k8s.io"
API_VERSION = f"{GROUP}/v1"
KEY = (GROUP, "events")


class _Omit:
    """Go's `omitempty`: an unset field is left out of the JSON."""


OMIT = _Omit()
# (field in the view written, field it comes from, what Go sends when it is unset), in Go's field
# order. Structs and times carry no working `omitempty`: Go sends `{}` and `null` for them.
TO_V1: tuple[tuple[str, str, Any], ...] = (
    ("eventTime", "eventTime", None),
    ("series", "series", OMIT),
    ("reportingController", "reportingComponent", OMIT),
    ("reportingInstance", "reportingInstance", OMIT),
    ("action", "action", OMIT),
    ("reason", "reason", OMIT),
    ("regarding", "involvedObject", {}),
    ("related", "related", OMIT),
    ("note", "message", OMIT),
    ("type", "type", OMIT),
    ("deprecatedSource", "source", {}),
    ("deprecatedFirstTimestamp", "firstTimestamp", None),
    ("deprecatedLastTimestamp", "lastTimestamp", None),
    ("deprecatedCount", "count", OMIT),
)
TO_CORE: tuple[tuple[str, str, Any], ...] = (
    ("involvedObject", "regarding", {}),
    ("reason", "reason", OMIT),
    ("message", "note", OMIT),
    ("source", "deprecatedSource", {}),
    ("firstTimestamp", "deprecatedFirstTimestamp", None),
    ("lastTimestamp", "deprecatedLastTimestamp", None),
    ("count", "deprecatedCount", OMIT),
    ("type", "type", OMIT),
    ("eventTime", "eventTime", None),
    ("series", "series", OMIT),
    ("action", "action", OMIT),
    ("related", "related", OMIT),
    ("reportingComponent", "reportingController", ""),
    ("reportingInstance", "reportingInstance", ""),
)
# The field selectors events.k8s.io/v1 accepts and the core field each selects on (its
# AddFieldLabelConversionsForEvent); `source` selects on the source's component, as in core.
FIELD_LABELS = {
    "metadata.name": "metadata.name",
    "metadata.namespace": "metadata.namespace",
    "reason": "reason",
    "type": "type",
    "source": "source.component",
    "reportingController": "reportingComponent",
    **{
        f"regarding.{part}": f"involvedObject.{part}"
        for part in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    },
}


def is_view(rtype: ResourceType) -> bool:
    """Whether `rtype` is events.k8s.io's Events, served from the store's core Events."""
    return rtype.key == KEY


def _unset(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, int) and not isinstance(value, bool) and value == 0)


def _convert(obj: Obj, fields: tuple[tuple[str, str, Any], ...], api_version: str) -> Obj:
    """`obj` under the other group's field names; fields neither group has are dropped, as Go drops them."""
    out: Obj = {"kind": "Event", "apiVersion": api_version, "metadata": obj.get("metadata") or {}}
    for target, source, zero in fields:
        value = obj.get(source)
        if not _unset(value):
            out[target] = value
        elif zero is not OMIT:
            out[target] = dict(zero) if isinstance(zero, dict) else zero  # a fresh {} for each object
    return out


def to_v1(core: Obj) -> Obj:
    """A stored core/v1 Event as events.k8s.io/v1 serves it (shares the stored values: do not change)."""
    return _convert(core, TO_V1, API_VERSION)


def to_core(event: Obj) -> Obj:
    """An events.k8s.io/v1 Event as the core/v1 Event the store keeps."""
    return _convert(event, TO_CORE, "v1")


def core_field_selector(text: str | None) -> str | None:
    """An events.k8s.io/v1 field selector in core terms; a field it does not support is a 400."""
    try:
        requirements = parse_field_selector(text)
    except SelectorError as exc:
        raise errors.bad_request(str(exc)) from exc
    if not requirements:
        return text
    terms = []
    for req in requirements:
        path = FIELD_LABELS.get(req.path)
        if path is None:
            raise errors.bad_request(f"field label not supported: {req.path}")
        terms.append(f"{path}{'!=' if req.negate else '='}{req.value}")
    return ",".join(terms)


@contextmanager
def _named_in_group() -> Iterator[None]:
    """Errors the store raises about core `events` name them as this group's, as the server does."""
    try:
        yield
    except errors.ApiError as exc:
        details = exc.details or {}
        if details.get("kind") in ("events", "Event") and not details.get("group"):
            kind = str(details["kind"])
            exc.message = exc.message.replace(f'{kind} "', f'{kind}.{GROUP} "', 1)
            exc.details = {**details, "group": GROUP}
        raise


class EventsV1View:
    """The store's object verbs (list, watch, get, create, replace, patch, delete) for events.k8s.io/v1,
    over the core/v1 Events the store holds. `rtype` arguments are the view's type, kept so the
    dispatcher calls this as it calls the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def core(self) -> ResourceType:
        return self.store.type("", "v1", "events")

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> ListResult:
        fields = core_field_selector(field_selector)
        result = self.store.list(self.core, namespace, label_selector, fields, limit, continue_token)
        return dataclasses.replace(result, items=[to_v1(obj) for obj in result.items])

    def watch(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
    ) -> Watcher:
        fields = core_field_selector(field_selector)
        watcher = self.store.watch(self.core, namespace, label_selector, fields, resource_version)
        watcher.view = to_v1  # before anyone reads it: events queued already are converted too
        return watcher

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        with _named_in_group():
            return to_v1(self.store.get(self.core, namespace, name))

    def create(self, rtype: ResourceType, namespace: str | None, body: Obj) -> Obj:
        event_namespace = namespace or (body.get("metadata") or {}).get("namespace") or "default"
        check_create(body, event_namespace)
        with _named_in_group():
            return to_v1(self.store.create(self.core, namespace, to_core(body)))

    def replace(
        self, rtype: ResourceType, namespace: str | None, name: str, body: Obj, subresource: str | None = None
    ) -> Obj:
        with _named_in_group():
            return to_v1(self.store.replace(self.core, namespace, name, to_core(body), subresource))

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        patch: Any,
        subresource: str | None = None,
    ) -> Obj:
        """A patch applies to the view (its field names), then the result is stored as an update,
        so a resourceVersion the patch leaves in the object is still a precondition."""
        with self.store.lock, _named_in_group():
            current = to_v1(self.store.get(self.core, namespace, name))
            patched = apply_patch(content_type, current, patch)
            return to_v1(self.store.replace(self.core, namespace, name, to_core(patched), subresource))

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        grace_seconds: int | None = None,
        preconditions: Obj | None = None,
        propagation: str | None = None,
    ) -> Obj:
        with _named_in_group():
            answer = self.store.delete(self.core, namespace, name, grace_seconds, preconditions, propagation)
        details = answer.get("details") if answer.get("kind") == "Status" else None
        if isinstance(details, dict):
            answer = {**answer, "details": {**details, "group": GROUP}}
        return answer


def stored_form(store: Store, rtype: ResourceType, obj: Obj) -> tuple[ResourceType, Obj]:
    """The type and object the store keeps for `obj` of `rtype`: an events.k8s.io/v1 Event is kept as
    the core/v1 Event it is (bulk loads use this, so a loaded Event is served in both groups)."""
    if not is_view(rtype):
        return rtype, obj
    return store.type("", "v1", "events"), to_core(obj)
