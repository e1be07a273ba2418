"""Lease-based leader election (coordination.k8s.io/v1): one replica acts, the others wait.

Holding is judged by renewals the API server acknowledged, timed by when they were *sent*: the
renewTime we write is that send time, so other replicas count the lease's expiry from a moment no
later than the one we count from, however slow the answer was. While we hold the lease, renewing is
one PUT of the Lease our last acknowledged write returned (its resourceVersion makes it
compare-and-swap); a 409 means someone else wrote it, and we read it and decide again. That PUT
landing also proves nobody took the lease since our previous renewal, even one that had expired
meanwhile (taking it is a write), so a long pass renews before it writes instead of giving up.

A replica may act only while its last acknowledged renewal is younger than two thirds of the
duration (`holds`); the rest is margin for a write in flight. Between two thirds and the whole
duration it still holds the lease (`held`: nobody else can take it) but cannot act.

Another replica's Lease is judged as client-go's leader election judges it: by when *this* replica
last saw the Lease change (its holder, renewTime or duration), on this replica's own clock, never by
comparing the holder's renewTime with our clock. So a standby whose clock runs ahead cannot take a
Lease the leader still renews, and a renewTime left in the future by a dead replica expires one
duration after we first saw it, like any other. A replica that starts (or meets a holder it had not
seen) therefore waits a whole duration before taking the Lease; a released one (no holder) it takes
at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from upgrader.core.model.timefmt import rfc3339_micro
from upgrader.kube.api import ApiError, KubeApi

Obj = dict[str, Any]
log = logging.getLogger("upgrader")


class LeaderElector:
    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        duration: float,
        clock: Callable[[], float],
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.clock = clock
        self.renewed_at: float | None = None  # send time of our last renewal the API server acknowledged
        self.last_error: str | None = None  # why the last renewal got no answer, until one succeeds
        self._lease: Obj | None = None  # the Lease as that renewal returned it
        # The last acknowledged write took the lease rather than renewed our own unchanged one:
        # another replica may have led since our previous renewal.
        self.reacquired = False
        # Another holder's Lease as we last saw it, and when (our clock) we saw it change.
        self._observed: tuple[Any, ...] | None = None
        self.observed_at: float | None = None
        # What `peek` saw: "" no Lease, a resourceVersion a released one; None held, or not peeked.
        self._free_at_peek: str | None = None
        # The last acquisition took a Lease nobody held since `peek` (see there).
        self.took_free = False

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def act_window(self) -> float:
        return self.duration * 2 / 3

    def age(self) -> float | None:
        """Seconds since our last acknowledged renewal was sent; None when we have none."""
        return None if self.renewed_at is None else self.clock() - self.renewed_at

    def held(self) -> bool:
        """Our last acknowledged renewal has not expired: no other replica can take the lease."""
        age = self.age()
        return age is not None and age < self.duration

    def holds(self) -> bool:
        """True while our last acknowledged renewal is fresh enough to act on (two thirds of the duration)."""
        age = self.age()
        return age is not None and age < self.act_window

    def renew_if_old(self) -> bool:
        """Before a write: renew once the last renewal is a third of the duration old; True when we may act.

        Only our own Lease, compare-and-swap, even past its expiry: if that lands, nobody wrote the
        Lease since, so nobody led meanwhile. Never acquires anew: another replica may have led and
        the pass's decisions may rest on what it changed.
        """
        age = self.age()
        if age is None:
            return False
        if age >= self.duration / 3:
            self._renew(acquire=False)
        return self.holds()

    def why_stale(self) -> str:
        """Why we hold the lease but cannot act, for the log and /readyz."""
        age = self.age()
        failed = f"renewing failed ({self.last_error}); " if self.last_error else ""
        if age is None:
            return f"{failed}no acknowledged renewal"
        return f"{failed}last acknowledged renewal {age:.1f} s ago, older than {self.act_window:.1f} s (API latency?)"

    def peek(self) -> None:
        """Read the Lease before the start's lists (one GET, no write). If it is free then (absent,
        or released by a clean shutdown) and still the same Lease when we take it, no replica led
        between this read and ours: whatever the last holder wrote came before it, so lists read
        after it hold it all, and the first pass may read the watch-fed copy they seeded
        (`took_free`) instead of listing the fleet again."""
        lease = self.api.get(self.path)
        if lease is None:
            self._free_at_peek = ""
            return
        free = (lease.get("spec") or {}).get("holderIdentity") in (None, "")
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        self._free_at_peek = version if free and version else None

    def acquire_or_renew(self) -> bool:
        """Renew (one request while we hold it) or acquire; True when the API server acknowledged."""
        return self._renew(acquire=True)

    def _renew(self, acquire: bool) -> bool:
        """An error other than a 409 keeps the last acknowledged renewal: it holds until it expires."""
        try:
            if self._lease is not None:
                try:
                    self._write(self._lease)
                    self.reacquired = False
                    return True
                except ApiError as exc:
                    if exc.status not in (404, 409):
                        raise
                    self._lost()  # written or deleted since our last renewal: someone else may have led
            return acquire and self._acquire()
        except ApiError as exc:
            if exc.status == 409:  # another replica won the race, as designed
                self._lost()
                return False
            self._say(exc)
            self.last_error = exc.summary
            return False

    def _acquire(self) -> bool:
        lease = self.api.get(self.path)
        now = self.clock()  # after the read: a change we see counts from no earlier than its reading
        peeked, self._free_at_peek = self._free_at_peek, None  # only the first acquisition after a peek
        if lease is None:
            sent = self.clock()
            self._acknowledged(self.api.create(self.path.rsplit("/", 1)[0], self._body(None, sent)), sent)
            self.reacquired, self.took_free = True, peeked == ""
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        if holder not in (None, "", self.identity) and not self.expired(spec, now):
            self._lost()
            return False
        self._write(lease)  # a compare-and-swap: it lands only on the very Lease read above
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        self.reacquired, self.took_free = True, bool(peeked) and peeked == version
        return True

    def expired(self, spec: Obj, now: float) -> bool:
        """Whether another holder's Lease has gone unchanged for its whole duration, as this replica saw it."""
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed or self.observed_at is None:
            self._observed, self.observed_at = record, now
        try:
            duration = float(spec.get("leaseDurationSeconds") or self.duration)
        except (TypeError, ValueError):
            duration = self.duration
        return now - self.observed_at >= duration

    def _write(self, current: Obj) -> None:
        sent = self.clock()
        self._acknowledged(self.api.replace(self.path, self._body(current, sent)), sent)

    def _say(self, exc: ApiError) -> None:
        """Once per change of error: an API server that is away is said by the loop that retries
        (reachability.py), so it is only a debug line here."""
        text = f"leader lease {self.namespace}/{self.name}: {exc}"
        repeated = self.last_error == exc.summary
        (log.debug if exc.away or repeated else log.warning)("%s", text)

    def _acknowledged(self, lease: Obj, sent: float) -> None:
        self._lease, self.renewed_at, self.last_error = lease, sent, None

    def _lost(self) -> None:
        self._lease, self.renewed_at, self.last_error = None, None, None

    def release(self) -> None:
        """Give the lease up on a clean shutdown so another replica takes over at once."""
        if self.renewed_at is None:
            return
        kept = self._lease
        for lease in (kept, None) if kept is not None else (None,):
            try:
                lease = lease or self.api.get(self.path)
                if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                    spec = {**lease["spec"], "holderIdentity": None, "renewTime": rfc3339_micro(0)}
                    self.api.replace(self.path, {**lease, "spec": spec})
                break
            except ApiError as exc:
                if exc.status != 409:  # 409 on the kept copy: written since, read it and look again
                    break
        self._lost()

    def _body(self, current: Obj | None, now: float) -> Obj:
        stamp = rfc3339_micro(now)
        spec = dict((current or {}).get("spec") or {})
        changed_hands = spec.get("holderIdentity") != self.identity
        if changed_hands:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if current else 0)
        spec.update(
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.duration)),
                "renewTime": stamp,
            }
        )
        metadata = dict((current or {}).get("metadata") or {"name": self.name, "namespace": self.namespace})
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
