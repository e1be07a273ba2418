"""Prometheus metrics on an explicit registry, and the small HTTP server for /metrics, /healthz, /readyz.

Per-process series (passes, API requests, transitions written, leadership) are on every replica;
the rollout's gauges only on the leader (`rollout_metrics`). Every counter and histogram series
whose labels are known up front exists at 0 from start-up, so `increase()` sees the first event.
Label cardinality stays low: states, domains, reason kinds, verbs and outcomes are small fixed
sets. Node names appear only in `upgrader_node_blocked_info`, one series per node that is blocked
or failed right now.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from upgrader import __version__
from upgrader.controller.rollout_metrics import RolloutCollector
from upgrader.core.model.states import UNLABELLED, State
from upgrader.core.node.machine import edges
from upgrader.core.rollout.detect import FIRST_LABELS

STATE_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
PASS_RESULTS = ("ok", "error", "not_leader", "stale_lease")
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
# Outcomes seen up front: the answers upgrader handles by name. Any other status code gets its
# series at its first occurrence.
OUTCOMES = ("ok", "unreachable", "400", "403", "404", "409", "410", "422", "429", "500", "503", "504")


def transition_pairs() -> list[tuple[str, str]]:
    """Every label write a pass can make: the machine's edges, and the first labelling of a node."""
    return [(UNLABELLED, s.value) for s in FIRST_LABELS] + [(a.value, b.value) for a, b in edges()]


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None, leading: Callable[[], bool] = lambda: True) -> None:
        """`leading`: does this replica hold the Lease right now (asked at every scrape)."""
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.rollout = RolloutCollector(leading)
        r.register(self.rollout)
        self.transitions = Counter(
            "upgrader_state_transitions",
            "State label writes by this replica, first labellings (from_state=unlabelled) included.",
            ["from_state", "to_state"],
            registry=r,
        )
        self.state_duration = Histogram(
            "upgrader_state_duration_seconds",
            "Time a node spent in a state, observed when it left it.",
            ["state"],
            buckets=STATE_BUCKETS,
            registry=r,
        )
        self.passes = Counter("upgrader_reconcile", "Reconcile passes by result.", ["result"], registry=r)
        self.pass_errors = Counter(
            "upgrader_reconcile_errors", "Reconcile passes that ended in an API error.", registry=r
        )
        self.pass_duration = Histogram(
            "upgrader_reconcile_duration_seconds", "Duration of a reconcile pass.", registry=r
        )
        self.requests = Counter(
            "upgrader_api_requests", "Kubernetes API requests by verb and outcome.", ["verb", "outcome"], registry=r
        )
        build = Gauge("upgrader_build_info", "1, labelled with this controller's version.", ["version"], registry=r)
        build.labels(__version__).set(1)
        self.leader = Gauge("upgrader_leader", "1 while this replica holds the leader lease.", registry=r)
        self.leader.set_function(lambda: 1.0 if leading() else 0.0)
        self.object_missing = Gauge(
            "upgrader_rollout_object_missing",
            "1 while the DriverRollout this controller runs (or its CRD) is gone: the nodes in progress finish "
            "under the last spec, none starts (docs/operations.md#the-rollout-object-deleted).",
            registry=r,
        )
        self.last_pass = Gauge(
            "upgrader_last_pass_timestamp_seconds", "When the last reconcile pass ended.", registry=r
        )
        self._zeros()

    def _zeros(self) -> None:
        for source, target in transition_pairs():
            self.transitions.labels(source, target)
        for state in State:
            self.state_duration.labels(state.value)
        for result in PASS_RESULTS:
            self.passes.labels(result)
        for verb in VERBS:
            for outcome in OUTCOMES:
                self.requests.labels(verb, outcome)

    # ----- from a pass ------------------------------------------------------------------------------

    def observe_transition(self, source: str, target: str, seconds_in_source: float | None) -> None:
        self.transitions.labels(source, target).inc()
        if seconds_in_source is not None:
            self.state_duration.labels(source).observe(max(0.0, seconds_in_source))

    def observe_pass(self, result: str, seconds: float, leader: bool) -> None:
        if not leader:
            self.rollout.drop()  # lost or never held: its last view of the rollout is no longer true
        self.passes.labels(result).inc()
        if result == "error":
            self.pass_errors.inc()
        self.pass_duration.observe(seconds)
        self.last_pass.set(time.time())

    def count_request(self, verb: str, outcome: str) -> None:
        self.requests.labels(verb, outcome).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """/metrics, /healthz (the loop is alive) and /readyz (a pass succeeded recently)."""

    def __init__(
        self,
        metrics: Metrics,
        port: int,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
        host: str = "0.0.0.0",
        reason: Callable[[], str | None] | None = None,  # why /readyz fails, for its body
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    outer._send(self, 200, metrics.exposition(), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok = healthy()
                    outer._send(self, 200 if ok else 503, b"ok\n" if ok else b"reconcile loop stalled\n")
                elif path == "/readyz":
                    ok = ready()
                    why = (reason() if reason else None) or "no successful pass recently"
                    outer._send(self, 200 if ok else 503, b"ok\n" if ok else why.encode() + b"\n")
                else:
                    outer._send(self, 404, b"not found\n")

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics", daemon=True)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str = "text/plain") -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
