"""Lease-based leader election (coordination.k8s.io/v1): one replica acts, the others wait.

A replica acts in a pass only after renewing the lease at the start of it, and stops acting
when its last renewal is older than the lease duration minus a safety margin (see `holds`).
Renewals are optimistic-concurrency updates: a 409 means someone else won.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from upgrader.core.timefmt import parse_or_none, rfc3339_micro
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
        self.renewed_at: float | None = None

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def holds(self) -> bool:
        """True while our last renewal is fresh enough to act on (two thirds of the duration)."""
        return self.renewed_at is not None and self.clock() - self.renewed_at < self.duration * 2 / 3

    def acquire_or_renew(self) -> bool:
        now = self.clock()
        try:
            lease = self.api.get(self.path)
            if lease is None:
                self.api.create(self.path.rsplit("/", 1)[0], self._lease(None, now))
            else:
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity")
                renewed = parse_or_none(spec.get("renewTime")) or 0.0
                expired = now > renewed + float(spec.get("leaseDurationSeconds") or self.duration)
                if holder not in (None, "", self.identity) and not expired:
                    self.renewed_at = None
                    return False
                self.api.replace(self.path, self._lease(lease, now))
        except ApiError as exc:
            if exc.status != 409:  # 409: another replica won the race, as designed
                log.warning("leader lease %s/%s: %s", self.namespace, self.name, exc)
            self.renewed_at = None
            return False
        self.renewed_at = now
        return True

    def release(self) -> None:
        """Give the lease up on a clean shutdown so another replica takes over at once."""
        if self.renewed_at is None:
            return
        try:
            lease = self.api.get(self.path)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = rfc3339_micro(0)
                self.api.replace(self.path, lease)
        except ApiError:
            pass
        self.renewed_at = None

    def _lease(self, current: Obj | None, now: float) -> Obj:
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
