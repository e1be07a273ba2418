"""The emulator's object store: the API semantics the controller depends on, without HTTP.

Stored objects are never mutated in place: every write stores a new dict, so readers can hold
on to what they got. `Store.get`/`list` return stored objects (callers must copy before
changing them); the request dispatcher serialises them.
"""

from __future__ import annotations

import copy
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from upgrader.sim.apiserver import deletion, errors
from upgrader.sim.apiserver.backup import Backup
from upgrader.sim.apiserver.clock import Clock, RealClock, rfc3339
from upgrader.sim.apiserver.crd_schema import admit
from upgrader.sim.apiserver.listing import Key, ListQuery, ListResult, equality_value, parse_selectors, select_page
from upgrader.sim.apiserver.patch import apply_patch
from upgrader.sim.apiserver.podutil import PodIndex
from upgrader.sim.apiserver.registry import Registry, ResourceType
from upgrader.sim.apiserver.timers import Timers
from upgrader.sim.apiserver.validation import check_labels
from upgrader.sim.apiserver.watch import Change, ChangeFeed, Watcher, parse_resource_version
from upgrader.sim.apiserver.wire import fill_wire_defaults
from upgrader.sim.apiserver.writes import check_resource_version, meta, place, stamp_created, written_over

__all__ = ["DEFAULT_NAMESPACES", "HISTORY_LIMIT", "NAME_ALPHABET", "ListResult", "Reactor", "Store", "meta"]

Obj = dict[str, Any]
Reactor = Callable[[Change], None]

NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
HISTORY_LIMIT = 200_000
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class Store:
    """All objects, a global resourceVersion, watch fan-out, timers and behaviour hooks."""

    def __init__(self, clock: Clock | None = None, seed: int = 0) -> None:
        self.clock: Clock = clock or RealClock()
        self.registry = Registry.default()
        self.lock = threading.RLock()
        self.rng = random.Random(seed)
        self.timers = Timers(self.clock)
        self.reactors: list[Reactor] = []
        self._data: dict[tuple[str, str], dict[Key, Obj]] = {}
        self._sorted: dict[tuple[str, str], list[Key]] = {}
        self._rv = 0
        self._feed = ChangeFeed(HISTORY_LIMIT)
        self._pending: deque[Change] = deque()
        self._pods = PodIndex()
        self._dispatching = False
        self._quiet = 0  # inside bulk(): commit without running reactors
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
            return list(self._pods.on(node_name).values())

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> ListResult:
        scope = namespace if rtype.namespaced else None
        query = ListQuery.parse(scope, label_selector, field_selector, limit, continue_token)
        with self.lock:
            bucket = self._bucket(rtype)
            node = equality_value(query, "spec.nodeName") if rtype.key == ("", "pods") else None
            if node:  # a node's pods (what kubectl drain and the controller ask): use the index
                return select_page(query, bucket, sorted(self._pods.on(node)), str(self._rv))
            keys = self._sorted.get(rtype.key)
            if keys is None:
                keys = self._sorted[rtype.key] = sorted(bucket)
            return select_page(query, bucket, keys, str(self._rv))

    # ----- writes ---------------------------------------------------------------------------

    def create(self, rtype: ResourceType, namespace: str | None, body: Obj, strict: bool = False) -> Obj:
        """POST; `strict`: the request's fieldValidation=Strict (an unknown field of a custom
        resource is refused, not pruned)."""
        with self.lock:
            return self._create(rtype, namespace, copy.deepcopy(body), restore=False, strict=strict)

    def restore(self, rtype: ResourceType, namespace: str | None, obj: Obj) -> Obj:
        """Store an object as a dump holds it (bulk loads): a uid and creationTimestamp it carries
        stay, so owner references between loaded objects hold; `obj` itself is stored, not a copy."""
        with self.lock:
            return self._create(rtype, namespace, obj, restore=True)

    def _create(self, rtype: ResourceType, namespace: str | None, obj: Obj, restore: bool, strict: bool = False) -> Obj:
        if rtype.custom:
            obj = admit(rtype, obj, strict)
        m = meta(obj)
        place(rtype, namespace, m, lambda ns: self.find(self.type("", "v1", "namespaces"), "", ns) is not None)
        if not m.get("name"):
            if not m.get("generateName"):
                raise errors.invalid(
                    rtype.kind, "", "metadata.name: Required value: name or generateName is required"
                )
            m["name"] = m["generateName"] + self.random_suffix()
        check_labels(rtype, obj)
        key = self._key(rtype, m.get("namespace"), m["name"])
        if key in self._bucket(rtype):
            raise errors.already_exists(rtype.plural, rtype.group, m["name"])
        uid = str(m.get("uid") or "") if restore else ""
        created = str(m.get("creationTimestamp") or "") if restore else ""
        stamp_created(rtype, obj, uid or self.new_uid(), created or rfc3339(self.clock.now()))
        self._commit(rtype, key, None, obj)
        return obj

    def replace(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Obj,
        subresource: str | None = None,
        strict: bool = False,
    ) -> Obj:
        """PUT: a stale metadata.resourceVersion is a 409 Conflict."""
        with self.lock:
            current = self.get(rtype, namespace, name)
            body_meta = body.get("metadata") or {}
            if body_meta.get("name", name) != name:
                raise errors.bad_request("the name of the object does not match the name on the URL")
            check_resource_version(rtype, name, current, body_meta.get("resourceVersion"))
            return self._write_over(rtype, current, copy.deepcopy(body), subresource, strict)

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        patch: Any,
        subresource: str | None = None,
        strict: bool = False,
    ) -> Obj:
        with self.lock:
            current = self.get(rtype, namespace, name)
            patched = apply_patch(content_type, current, patch, custom=rtype.custom)
            # A resourceVersion the patch leaves in the object is a precondition, whichever patch
            # format put it there (merge, strategic, or a JSON patch `replace`).
            check_resource_version(rtype, name, current, (patched.get("metadata") or {}).get("resourceVersion"))
            return self._write_over(rtype, current, patched, subresource, strict)

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

    def _write_over(
        self, rtype: ResourceType, current: Obj, new: Obj, subresource: str | None, strict: bool = False
    ) -> Obj:
        new = written_over(rtype, current, new, subresource)
        if rtype.custom:
            new = admit(rtype, new, strict)
        if new == current:
            return current
        if new["metadata"].get("labels") != current["metadata"].get("labels"):
            check_labels(rtype, new)
        cur_meta = current["metadata"]
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
            deletion.check_preconditions(rtype, name, current, preconditions)
            if rtype.kind == "Pod":
                grace = deletion.pod_grace(current, grace_seconds)
                if grace > 0:
                    return self._terminate_gracefully(rtype, current, grace)
            self.remove(rtype, current)
            if propagation != "Orphan":
                deletion.collect_dependents(self, current["metadata"]["uid"])
            return deletion.deletion_answer(rtype, current)

    def _terminate_gracefully(self, rtype: ResourceType, pod: Obj, grace: int) -> Obj:
        now = self.clock.now()
        m = pod["metadata"]
        started = deletion.termination_start(pod, grace, now)
        if started is None:
            return pod  # already terminating at least as fast
        updated = copy.deepcopy(pod)
        updated["metadata"]["deletionTimestamp"] = rfc3339(started + grace)
        updated["metadata"]["deletionGracePeriodSeconds"] = grace
        self._commit(rtype, self._key(rtype, m.get("namespace"), m["name"]), pod, updated)
        self.expire_terminating(rtype, updated, started + grace - now)
        return updated

    def expire_terminating(self, rtype: ResourceType, pod: Obj, delay: float) -> None:
        """Take a terminating pod away once its grace period is over (`delay` seconds from now)."""
        ns, name, uid = pod["metadata"].get("namespace"), pod["metadata"]["name"], pod["metadata"]["uid"]

        def finish() -> None:
            gone = self.find(rtype, ns, name)
            # Still terminating: a restore can bring the same pod back alive.
            if gone is not None and gone["metadata"]["uid"] == uid and gone["metadata"].get("deletionTimestamp"):
                self.remove(rtype, gone)
                deletion.collect_dependents(self, uid)

        self.timers.after(delay, f"terminate pod {ns}/{name}", finish)

    def remove(self, rtype: ResourceType, obj: Obj) -> None:
        """Take an object out of the store now (a DELETED event carries its last state)."""
        with self.lock:
            m = obj["metadata"]
            key = self._key(rtype, m.get("namespace"), m["name"])
            current = self._bucket(rtype).get(key)
            if current is None:
                return
            self._commit(rtype, key, current, None)

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
            self._pods.update(key, old, new)
        self._feed.publish(change)
        if self._quiet:
            return
        self._pending.append(change)
        self._dispatch()

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Writes inside commit and reach watchers, but run no behaviour reactors: whoever opened
        it settles the behaviours once afterwards (`loading.load`)."""
        with self.lock:
            self._quiet += 1
            try:
                yield
            finally:
                self._quiet -= 1

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
        labels, fields = parse_selectors(label_selector, field_selector)
        watcher = Watcher(rtype.key, namespace if rtype.namespaced else None, labels, fields)
        with self.lock:
            if resource_version in (None, "", "0"):
                for obj in self.list(rtype, namespace, label_selector, field_selector).items:
                    watcher.push("ADDED", obj)
            else:
                since = parse_resource_version(resource_version)
                try:
                    self._feed.replay(watcher, since, self._rv)
                except errors.ApiError as exc:  # as kube-apiserver answers: one ERROR event, then the end
                    watcher.push("ERROR", exc.body())
                    watcher.close()
                    return watcher
            self._feed.subscribe(watcher)
        return watcher

    def stop_watch(self, watcher: Watcher) -> None:
        with self.lock:
            self._feed.unsubscribe(watcher)
        watcher.close()

    # ----- backup and restore ---------------------------------------------------------------

    def backup(self) -> Backup:
        """Every object and the resourceVersion now, as an etcd snapshot holds them (the objects
        themselves: a stored object is never changed in place)."""
        with self.lock:
            return Backup(self._rv, {key: dict(bucket) for key, bucket in self._data.items()})

    def restore_from(self, backup: Backup, bump_revision: int = 0, future_watches: str | None = None) -> None:
        """Serve `backup`'s objects as an API server restarted on a restored etcd: every watch ends,
        resourceVersions go back to the backup's (plus `bump_revision`: etcdutl's --bump-revision
        with --mark-compacted, after which every watch resumed is 410 Expired), and a watch from a
        version not reached gets `future_watches` (see `FUTURE_WATCHES`). No reactor runs."""
        with self.lock:
            self._feed.restart(backup.resource_version + bump_revision, future_watches)
            self._data = {key: dict(bucket) for key, bucket in backup.objects.items()}
            self._sorted.clear()
            self._pods.rebuild(self._data.get(("", "pods"), {}))
            self._pending.clear()
            self._rv = backup.resource_version + bump_revision

    # ----- time -----------------------------------------------------------------------------

    def run_due(self) -> int:
        """Run every timer that is due at the clock's current time; returns how many ran."""
        with self.lock:
            return self.timers.run_due()

    def advance(self, seconds: float) -> None:
        """Move a virtual clock forward, firing timers at their own due times on the way."""
        set_time = getattr(self.clock, "set", None)
        if set_time is None:
            raise TypeError("advance() needs a virtual clock")
        with self.lock:
            self.timers.advance(seconds, set_time)

