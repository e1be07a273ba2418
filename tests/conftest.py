"""Network pieces shared by the tests: a port nothing listens on, a server that never answers, and a
Prometheus stand-in whose alerts API answers what a test says."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def free_port() -> int:
    """A loopback port nothing listens on (closed again when it returns): free to bind, refused to connect."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for conn in held:
        conn.close()


ACTIVE = "2026-11-30T21:58:00.123Z"


def answer(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"alerts": list(alerts)}}


def alert(name: str, state: str, **labels: str) -> dict[str, Any]:
    return {"labels": {"alertname": name, **labels}, "annotations": {"summary": "s"}, "state": state,
            "activeAt": ACTIVE, "value": "1e+00"}


class FakePrometheus:
    """Serves GET /api/v1/alerts with whatever `status` and `body` say now; records each request path."""

    def __init__(self) -> None:
        self.status = 200
        self.body: bytes = json.dumps(answer()).encode()
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def serve(self, data: Any, status: int = 200) -> None:
        self.status = status
        self.body = data if isinstance(data, bytes) else json.dumps(data).encode()


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def required_binary(name: str, install: str, required_by: str) -> str:
    """The path of `name`, or a skip naming how to install it; a failure where the environment
    variable `required_by` is set (CI sets it: there a skipped test is a failure)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed: {install}"
        if os.environ.get(required_by):
            pytest.fail(f"{message} ({required_by} is set: CI must run these tests)")
        pytest.skip(message)
    return path


def ctrl_c_reaches() -> None:
    """A `preexec_fn` for a child the test Ctrl-Cs: SIGINT back to its default, which a shell's
    background job (`cmd &` without job control) would otherwise hand down ignored."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
