"""Injected API faults and the request log that every request lands in."""

from __future__ import annotations

import json
import random
import threading
from dataclasses import asdict, dataclass, field
from typing import IO, Any

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
FAULT_KINDS = ("error500", "throttle429", "conflict409", "drop")


@dataclass
class FaultRates:
    """Probabilities (0..1) of each fault for one verb, plus added latency in seconds."""

    error500: float = 0.0
    throttle429: float = 0.0
    conflict409: float = 0.0
    drop: float = 0.0
    latency: float = 0.0
    retry_after: int = 1  # seconds announced with an injected 429

    def __post_init__(self) -> None:
        total = self.error500 + self.throttle429 + self.conflict409 + self.drop
        if min(self.error500, self.throttle429, self.conflict409, self.drop, self.latency) < 0 or total > 1:
            raise ValueError("fault rates must be non-negative and add up to at most 1")


@dataclass
class FaultPlan:
    """Per-verb fault rates; discovery and /version are never faulted."""

    rates: dict[str, FaultRates] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = set(self.rates) - set(VERBS)
        if unknown:
            raise ValueError(f"unknown verbs in fault plan: {sorted(unknown)}")
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    @classmethod
    def uniform(cls, rate: float, seed: int = 0, verbs: tuple[str, ...] = VERBS) -> FaultPlan:
        """`rate` of requests faulted, split evenly over the four fault kinds."""
        each = rate / 4
        return cls({v: FaultRates(each, each, each, each) for v in verbs}, seed)

    def draw(self, verb: str) -> tuple[str | None, float]:
        """The fault to inject for one request (or None) and the latency to add."""
        rates = self.rates.get(verb)
        if rates is None:
            return None, 0.0
        with self._lock:
            roll = self._rng.random()
        for kind in FAULT_KINDS:
            p = getattr(rates, kind)
            if roll < p:
                return kind, rates.latency
            roll -= p
        return None, rates.latency


@dataclass
class RequestRecord:
    """One request as the emulator saw it; `fault` names an injected fault."""

    seq: int
    time: float
    verb: str
    method: str
    path: str
    query: str
    status: int
    resource: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    fault: str | None = None
    user_agent: str = ""
    body: Any = None  # the decoded request body of writes

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)


class RequestLog:
    """Thread-safe list of RequestRecord, optionally mirrored to a JSON-lines audit file."""

    def __init__(self, audit: IO[str] | None = None) -> None:
        self._records: list[RequestRecord] = []
        self._lock = threading.Lock()
        self._audit = audit

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            record.seq = len(self._records) + 1
            self._records.append(record)
            if self._audit is not None:
                self._audit.write(record.to_json() + "\n")
                self._audit.flush()

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def __len__(self) -> int:
        return len(self._records)
