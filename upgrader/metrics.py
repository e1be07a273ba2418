"""Prometheus metrics on an explicit registry, and the small HTTP server for /metrics, /healthz, /readyz.

Label cardinality stays low: states, domains, reason kinds, verbs and outcomes are small fixed
sets. Node names appear only in `upgrader_node_blocked_info`, one series per node that is blocked
or failed right now (so at most the handful of stuck nodes), which alerts and the dashboard use to
name the node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from upgrader.core.states import IN_PROGRESS, STATE_COUNT_KEYS, State
from upgrader.core.status import PHASES
from upgrader.core.timefmt import parse_or_none

BLOCK_REASONS = ("pdb", "wait_for_jobs", "pod_deletion", "drain", "gpu_pods", "cordon_record", "driver_daemonset")
FAILURE_REASONS = (
    "image",
    "driver_restart",
    "validation",
    "pdb",
    "wait_for_jobs",
    "pod_deletion",
    "drain",
    "gpu_pods",
    "failed",
)
STATE_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)


def reason_label(kind: str) -> str:
    return kind.replace("-", "_")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.nodes = Gauge("upgrader_nodes", "Managed GPU nodes per upgrade state.", ["state"], registry=r)
        self.domain_nodes = Gauge(
            "upgrader_domain_nodes",
            "Managed GPU nodes per failure domain and upgrade state.",
            ["domain", "state"],
            registry=r,
        )
        self.phase = Gauge(
            "upgrader_rollout_phase", "1 for the rollout's current phase, 0 for the others.", ["phase"], registry=r
        )
        self.halted = Gauge("upgrader_rollout_halted", "1 while the rollout is halted: no new node starts.", registry=r)
        self.blocked = Gauge("upgrader_blocked_nodes", "Nodes blocked right now, by reason.", ["reason"], registry=r)
        self.failed = Gauge("upgrader_failed_nodes", "Nodes in upgrade-failed, by reason.", ["reason"], registry=r)
        self.blocked_info = Gauge(
            "upgrader_node_blocked_info",
            "1 per node that is blocked or failed now (node, state, reason kind).",
            ["node", "state", "reason"],
            registry=r,
        )
        self.oldest = Gauge(
            "upgrader_state_oldest_seconds",
            "Seconds the longest-waiting node has been in each in-progress state.",
            ["state"],
            registry=r,
        )
        self.transitions = Counter(
            "upgrader_state_transitions", "State transitions written.", ["from_state", "to_state"], registry=r
        )
        self.state_duration = Histogram(
            "upgrader_state_duration_seconds",
            "Time a node spent in a state.",
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
        self.leader = Gauge("upgrader_leader", "1 while this replica holds the leader lease.", registry=r)
        self.last_pass = Gauge(
            "upgrader_last_pass_timestamp_seconds", "When the last reconcile pass ended.", registry=r
        )
        for key in STATE_COUNT_KEYS:
            self.nodes.labels(key).set(0)
        for phase in PHASES:
            self.phase.labels(phase).set(0)
        for reason in BLOCK_REASONS:
            self.blocked.labels(reason).set(0)
        for reason in FAILURE_REASONS:
            self.failed.labels(reason).set(0)
        self.pass_errors.inc(0)
        self.halted.set(0)
        self._known_domains: set[str] = set()

    # ----- from a pass ------------------------------------------------------------------------------

    def observe_status(self, status: dict[str, Any], now: float) -> None:
        for state, count in status.get("nodes_by_state", {}).items():
            self.nodes.labels(state).set(count)
        for phase in PHASES:
            self.phase.labels(phase).set(1 if status.get("phase") == phase else 0)
        self.halted.set(1 if status.get("phase") == "Halted" else 0)
        blocked = status.get("blocked") or []
        failed = status.get("failed") or []
        for reason in BLOCK_REASONS:
            self.blocked.labels(reason).set(sum(1 for b in blocked if reason_label(b["kind"]) == reason))
        for reason in FAILURE_REASONS:
            self.failed.labels(reason).set(sum(1 for f in failed if reason_label(f["kind"]) == reason))
        self.blocked_info.clear()
        for b in blocked:
            self.blocked_info.labels(b["node"], b["state"], reason_label(b["kind"])).set(1)
        for f in failed:
            self.blocked_info.labels(f["node"], State.FAILED.value, reason_label(f["kind"])).set(1)
        self._domains(status)
        self._oldest(status, now)

    def _domains(self, status: dict[str, Any]) -> None:
        per_domain = {d["name"]: d.get("by_state") or {} for d in status.get("domains") or []}
        for domain in self._known_domains - set(per_domain):
            for key in STATE_COUNT_KEYS:
                self.domain_nodes.remove(domain, key)
        for domain, counts in per_domain.items():
            for key in STATE_COUNT_KEYS:
                self.domain_nodes.labels(domain, key).set(counts.get(key, 0))
        self._known_domains = set(per_domain)

    def _oldest(self, status: dict[str, Any], now: float) -> None:
        ages: dict[str, float] = {}
        for entry in status.get("in_progress") or []:
            since = parse_or_none(entry.get("since"))
            if since is not None:
                ages[entry["state"]] = max(ages.get(entry["state"], 0.0), now - since)
        for state in IN_PROGRESS:
            self.oldest.labels(state.value).set(round(ages.get(state.value, 0.0), 3))

    def observe_transition(self, source: str, target: str, seconds_in_source: float | None) -> None:
        self.transitions.labels(source, target).inc()
        if seconds_in_source is not None:
            self.state_duration.labels(source).observe(max(0.0, seconds_in_source))

    def observe_pass(self, result: str, seconds: float, leader: bool) -> None:
        self.passes.labels(result).inc()
        if result == "error":
            self.pass_errors.inc()
        self.pass_duration.observe(seconds)
        self.leader.set(1 if leader else 0)
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
