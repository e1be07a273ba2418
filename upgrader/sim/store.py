"""The emulator's object store: the API semantics the controller depends on, without HTTP.

Stored objects are never mutated in place: every write stores a new dict, so readers can hold
on to what they got. `Store.get`/`list` return stored objects (callers must copy before
changing them); the request dispatcher serialises them.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from upgrader.core.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from upgrader.sim import errors
from upgrader.sim.clock import Clock, RealClock, parse_rfc3339, rfc3339
from upgrader.sim.patch import apply_patch
from upgrader.sim.registry import Registry, ResourceType
from upgrader.sim.scheduler import Scheduler
from upgrader.sim.watch import Change, Watcher
from upgrader.sim.wire import fill_wire_defaults

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped
Reactor = Callable[[Change], None]

NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
HISTORY_LIMIT = 200_000
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# Resources whose DELETE answers with the object (ReturnDeletedObject); the rest answer a Status.
RETURN_DELETED_OBJECT = frozenset({"pods", "serviceaccounts", "services"})


@dataclass
class ListResult:
    items: list[Obj]
    resource_version: str
    continue_token: str | None = None
    remaining: int | None = None


def meta(obj: Obj) -> Obj:
    m: Obj = obj.setdefault("metadata", {})
    return m


class Store:
    """All objects, a global resourceVersion, watch fan-out, timers and behaviour hooks."""

    def __init__(self, clock: Clock | None = None, seed: int = 0) -> None:
        self.clock: Clock = clock or RealClock()
        self.registry = Registry.default()
        self.lock = threading.RLock()
        self.rng = random.Random(seed)
        self.scheduler = Scheduler(self.clock)
        self.reactors: list[Reactor] = []
        self._data: dict[tuple[str, str], dict[Key, Obj]] = {}
        self._sorted: dict[tuple[str, str], list[Key]] = {}
        self._rv = 0
        self._history: deque[Change] = deque(maxlen=HISTORY_LIMIT)
        self._watchers: list[Watcher] = []
        self._pending: deque[Change] = deque()
        self._pods_by_node: dict[str, dict[Key, Obj]] = {}
        self._dispatching = False
        for ns in DEFAULT_NAMESPACES:
            self.create(self.type("", "v1", "namespaces"), "", {"metadata": {"name": ns}})

    # ----- lookup helpers -------------------------------------------------------------------

    def type(self, group: str, version: str, plural: str) -> ResourceType:
        rtype = self.registry.lookup(group, version, plural)
        if rtype is None:
            raise errors.ApiError(404, f"the server could not find the requested resource ({plural})")
        return rtype

    @property
    def resource_version(self) -> int:
        return self._rv

    def _bucket(self, rtype: ResourceType) -> dict[Key, Obj]:
        return self._data.setdefault(rtype.key, {})

    def _key(self, rtype: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rtype.namespaced else "", name)

    def new_uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def random_suffix(self, n: int = 5) -> str:
        return "".join(self.rng.choice(NAME_ALPHABET) for _ in range(n))

    # ----- reads ----------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.lock:
            obj = self._bucket(rtype).get(self._key(rtype, namespace, name))
            if obj is None:
                raise errors.not_found(rtype.plural, rtype.group, name)
            return obj

    def find(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj | None:
        with self.lock:
            return self._bucket(rtype).get(self._key(rtype, namespace, name))

    def objects(self, rtype: ResourceType, namespace: str | None = None) -> list[Obj]:
        """Every object of a type (optionally one namespace), unsorted: for behaviour code."""
        with self.lock:
            bucket = self._bucket(rtype)
            if namespace is None or not rtype.namespaced:
                return list(bucket.values())
            return [o for (ns, _), o in bucket.items() if ns == namespace]

    def pods_on(self, node_name: str) -> list[Obj]:
        """Pods bound to a node (an index, since behaviours ask this often)."""
        with self.lock:
            return list(self._pods_by_node.get(node_name, {}).values())

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> ListResult:
        try:
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector)
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc
        start: Key | None = None
        if continue_token:
            start = _decode_continue(continue_token)
        with self.lock:
            bucket = self._bucket(rtype)
            keys = self._sorted.get(rtype.key)
            if keys is None:
                keys = self._sorted[rtype.key] = sorted(bucket)
            items: list[Obj] = []
            next_key: Key | None = None
            remaining = 0
            for key in keys:
                if start is not None and key <= start:
                    continue
                if namespace and rtype.namespaced and key[0] != namespace:
                    continue
                obj = bucket[key]
                if not labels.matches(obj["metadata"].get("labels")):
                    continue
                if fields and not all(f.matches(obj) for f in fields):
                    continue
                if limit and len(items) >= limit:
                    remaining += 1
                    continue
                items.append(obj)
                next_key = key
            rv = str(self._rv)
        if limit and remaining and next_key is not None:
            # With a selector the real server cannot count what is left, and leaves the field unset.
            counted = None if label_selector or field_selector else remaining
            return ListResult(items, rv, _encode_continue(rv, next_key), counted)
        return ListResult(items, rv)

    # ----- writes ---------------------------------------------------------------------------

    def create(self, rtype: ResourceType, namespace: str | None, body: Obj) -> Obj:
        with self.lock:
            obj = copy.deepcopy(body)
            m = meta(obj)
            if rtype.namespaced:
                ns = namespace or m.get("namespace") or "default"
                if m.get("namespace") not in (None, "", ns):
                    raise errors.bad_request(
                        "the namespace of the provided object does not match the namespace "
                        "sent on the request"
                    )
                if (
                    rtype.plural != "namespaces"
                    and self.find(self.type("", "v1", "namespaces"), "", ns) is None
                ):
                    raise errors.not_found("namespaces", "", ns)
                m["namespace"] = ns
            else:
                m.pop("namespace", None)
            if not m.get("name"):
                if not m.get("generateName"):
                    raise errors.invalid(
                        rtype.kind, "", "metadata.name: Required value: name or generateName is required"
                    )
                m["name"] = m["generateName"] + self.random_suffix()
            key = self._key(rtype, m.get("namespace"), m["name"])
            if key in self._bucket(rtype):
                raise errors.already_exists(rtype.plural, rtype.group, m["name"])
            obj["apiVersion"] = rtype.api_version
            obj["kind"] = rtype.kind
            m["uid"] = self.new_uid()
            m["creationTimestamp"] = rfc3339(self.clock.now())
            for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
                m.pop(transient, None)
            if "spec" in obj or rtype.kind in ("DaemonSet", "Deployment", "Job"):
                m["generation"] = 1
            self._commit(rtype, key, None, obj)
            return obj

    def replace(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Obj,
        subresource: str | None = None,
    ) -> Obj:
        """PUT: a stale metadata.resourceVersion is a 409 Conflict."""
        with self.lock:
            current = self.get(rtype, namespace, name)
            body_meta = body.get("metadata") or {}
            if body_meta.get("name", name) != name:
                raise errors.bad_request("the name of the object does not match the name on the URL")
            wanted = body_meta.get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.plural, rtype.group, name)
            return self._write_over(rtype, current, copy.deepcopy(body), subresource)

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        patch: Any,
        subresource: str | None = None,
    ) -> Obj:
        with self.lock:
            current = self.get(rtype, namespace, name)
            patched = apply_patch(content_type, current, patch)
            # A resourceVersion the patch leaves in the object is a precondition, whichever patch
            # format put it there (merge, strategic, or a JSON patch `replace`).
            wanted = (patched.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.plural, rtype.group, name)
            return self._write_over(rtype, current, patched, subresource)

    def mutate(
        self, rtype: ResourceType, namespace: str | None, name: str, change: Callable[[Obj], None]
    ) -> Obj | None:
        """Behaviour code's write: apply `change` to a copy and commit it if anything changed."""
        with self.lock:
            current = self.find(rtype, namespace, name)
            if current is None:
                return None
            updated = copy.deepcopy(current)
            change(updated)
            if updated == current:
                return current
            return self._write_over(rtype, current, updated, "internal")

    def _write_over(self, rtype: ResourceType, current: Obj, new: Obj, subresource: str | None) -> Obj:
        m, cur_meta = meta(new), current["metadata"]
        for fixed in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generateName",
        ):
            if fixed in cur_meta:
                m[fixed] = cur_meta[fixed]
            else:
                m.pop(fixed, None)
        new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
        if subresource == "status":
            new = {**current, "status": new.get("status", {})}
            new["metadata"] = dict(cur_meta)
        elif subresource is None and "status" in rtype.subresources:
            if "status" in current:
                new["status"] = current["status"]
            else:
                new.pop("status", None)
        if "generation" in cur_meta:
            changed = new.get("spec") != current.get("spec")
            new["metadata"]["generation"] = cur_meta["generation"] + (1 if changed else 0)
        if new == current:
            return current
        key = self._key(rtype, cur_meta.get("namespace"), cur_meta["name"])
        self._commit(rtype, key, current, new)
        return new

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        grace_seconds: int | None = None,
        preconditions: Obj | None = None,
        propagation: str | None = None,
    ) -> Obj:
        """Pods on a node terminate gracefully; everything else goes at once."""
        with self.lock:
            current = self.get(rtype, namespace, name)
            cur_meta = current["metadata"]
            for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                want = (preconditions or {}).get(field)
                if want and want != cur_meta.get(field):
                    raise errors.precondition_failed(
                        rtype.plural,
                        rtype.group,
                        name,
                        f"{label} in precondition: {want}, {label} in object meta: {cur_meta.get(field)}",
                    )
            if rtype.kind == "Pod":
                grace = _pod_grace(current, grace_seconds)
                if grace > 0:
                    return self._terminate_gracefully(rtype, current, grace)
            self.remove(rtype, current)
            if propagation != "Orphan":
                self._collect_dependents(cur_meta["uid"])
            return current if rtype.plural in RETURN_DELETED_OBJECT else _deleted_status(rtype, cur_meta)

    def _terminate_gracefully(self, rtype: ResourceType, pod: Obj, grace: int) -> Obj:
        now = self.clock.now()
        m = pod["metadata"]
        started = now
        if m.get("deletionTimestamp"):
            old_grace = int(m.get("deletionGracePeriodSeconds", grace))
            if old_grace <= grace:
                return pod  # already terminating at least as fast
            # Only a shorter grace period may be given; it counts from the first deletion request.
            started = parse_rfc3339(m["deletionTimestamp"]) - old_grace

        updated = copy.deepcopy(pod)
        updated["metadata"]["deletionTimestamp"] = rfc3339(started + grace)
        updated["metadata"]["deletionGracePeriodSeconds"] = grace
        key = self._key(rtype, m.get("namespace"), m["name"])
        self._commit(rtype, key, pod, updated)
        uid = m["uid"]

        def finish() -> None:
            gone = self.find(rtype, m.get("namespace"), m["name"])
            if gone is not None and gone["metadata"]["uid"] == uid:
                self.remove(rtype, gone)
                self._collect_dependents(uid)

        self.scheduler.after(started + grace - now, f"terminate pod {m.get('namespace')}/{m['name']}", finish)
        return updated

    def remove(self, rtype: ResourceType, obj: Obj) -> None:
        """Take an object out of the store now (a DELETED event carries its last state)."""
        with self.lock:
            m = obj["metadata"]
            key = self._key(rtype, m.get("namespace"), m["name"])
            current = self._bucket(rtype).get(key)
            if current is None:
                return
            self._commit(rtype, key, current, None)

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background cascading deletion: objects whose ownerReferences name the deleted owner."""
        for rtype in list(self.registry.types.values()):
            for obj in list(self._bucket(rtype).values()):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs):
                    m = obj["metadata"]
                    if self.find(rtype, m.get("namespace"), m["name"]) is obj:
                        self.delete(rtype, m.get("namespace"), m["name"])

    def _commit(self, rtype: ResourceType, key: Key, old: Obj | None, new: Obj | None) -> None:
        self._rv += 1
        bucket = self._bucket(rtype)
        if new is None:
            assert old is not None
            gone = copy.copy(old)
            gone["metadata"] = {**old["metadata"], "resourceVersion": str(self._rv)}
            del bucket[key]
            self._sorted.pop(rtype.key, None)
            change = Change(self._rv, "DELETED", rtype.key, old, gone)
        else:
            new["metadata"]["resourceVersion"] = str(self._rv)
            fill_wire_defaults(rtype.kind, new)
            if old is None:
                self._sorted.pop(rtype.key, None)
            bucket[key] = new
            change = Change(self._rv, "ADDED" if old is None else "MODIFIED", rtype.key, old, new)
        if rtype.key == ("", "pods"):
            self._index_pod(key, old, new)
        self._history.append(change)
        for watcher in self._watchers:
            watcher.offer(change)
        self._pending.append(change)
        self._dispatch()

    def _index_pod(self, key: Key, old: Obj | None, new: Obj | None) -> None:
        for obj, keep in ((old, False), (new, True)):
            node = ((obj or {}).get("spec") or {}).get("nodeName")
            if not node:
                continue
            bucket = self._pods_by_node.setdefault(node, {})
            if keep:
                bucket[key] = obj  # type: ignore[assignment]
            else:
                bucket.pop(key, None)

    def _dispatch(self) -> None:
        """Run behaviour reactors on each change, outermost write first, never re-entrantly."""
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._pending:
                change = self._pending.popleft()
                for reactor in self.reactors:
                    reactor(change)
        finally:
            self._dispatching = False

    # ----- watch ----------------------------------------------------------------------------

    def watch(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
    ) -> Watcher:
        try:
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector)
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc
        watcher = Watcher(rtype.key, namespace if rtype.namespaced else None, labels, fields)
        with self.lock:
            if resource_version in (None, "", "0"):
                for obj in self.list(rtype, namespace, label_selector, field_selector).items:
                    watcher.push("ADDED", obj)
            else:
                since = _parse_rv(resource_version)
                oldest = self._history[0].rv if self._history else self._rv + 1
                if since < oldest - 1 and len(self._history) == self._history.maxlen:
                    raise errors.ApiError(
                        410, f"too old resource version: {since} ({oldest - 1})", reason="Expired"
                    )
                for change in self._history:
                    if change.rv > since:
                        watcher.offer(change)
            self._watchers.append(watcher)
        return watcher

    def stop_watch(self, watcher: Watcher) -> None:
        with self.lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)
        watcher.close()

    # ----- time -----------------------------------------------------------------------------

    def run_due(self) -> int:
        """Run every timer that is due at the clock's current time; returns how many ran."""
        ran = 0
        with self.lock:
            while (timer := self.scheduler.pop_due(self.clock.now())) is not None:
                timer.action()
                ran += 1
        return ran

    def advance(self, seconds: float) -> None:
        """Move a virtual clock forward, firing timers at their own due times on the way."""
        set_time = getattr(self.clock, "set", None)
        if set_time is None:
            raise TypeError("advance() needs a virtual clock")
        with self.lock:
            target = self.clock.now() + seconds
            while True:
                due = self.scheduler.next_due()
                if due is None or due > target:
                    break
                set_time(max(due, self.clock.now()))
                self.run_due()
            set_time(target)


def _deleted_status(rtype: ResourceType, m: Obj) -> Obj:
    """What a DELETE answers for most resources: a Status naming what went (kind is the plural)."""
    details: Obj = {"name": m["name"], "kind": rtype.plural, "uid": m.get("uid", "")}
    if rtype.group:
        details["group"] = rtype.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def _pod_grace(pod: Obj, requested: int | None) -> int:
    """How long a deleted pod terminates: immediate when unscheduled or already finished."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return 0
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    if requested is not None and requested >= 0:
        return requested
    return int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))


def _parse_rv(text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise errors.bad_request(f"invalid resource version {text!r}") from exc


def _encode_continue(rv: str, key: Key) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": int(rv), "start": list(key)})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_continue(token: str) -> Key:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        ns, name = data["start"]
        return (str(ns), str(name))
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ) from exc
