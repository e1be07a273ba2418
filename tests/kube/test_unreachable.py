"""An API server that does not answer, or refuses: every ApiError is one line naming the server and
what went wrong, given up on within a CLI command's few seconds, with no urllib3 retries or warnings
underneath; a watch against a dead server says so once and backs off."""

from __future__ import annotations

import http.server
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port as closed_port
from upgrader.core.model.views import node_view
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.client import api_client
from upgrader.kube.informer import Informer
from upgrader.kube.reachability import BACKOFF_CAP_SECONDS

FORBIDDEN = 'nodes is forbidden: User "system:anonymous" cannot list resource "nodes" in API group ""'
CLI = {"attempts": 3, "max_delay": 5}  # what upgrader/commands/handlers.py builds its KubeApi with


def kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


def cli_api(tmp_path: Path, server: str) -> KubeApi:
    return KubeApi(api_client(kubeconfig(tmp_path, server)), **CLI)  # type: ignore[arg-type]


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """Answers 403 with a Status on /api/v1/nodes, and a proxy's 502 HTML page elsewhere."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/api/v1/nodes"):
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": FORBIDDEN,
                          "reason": "Forbidden", "code": 403}
                self._send(403, "application/json", json.dumps(status).encode())
            else:
                self._send(502, "text/html", b"<html>\n<head><title>502 Bad Gateway</title></head>\n</html>\n")

        def _send(self, code: int, kind: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def raised(api: KubeApi, path: str = "/api/v1/nodes") -> tuple[ApiError, float]:
    started = time.monotonic()
    with pytest.raises(ApiError) as caught:
        api.list(path)
    return caught.value, time.monotonic() - started


def test_a_closed_port_is_one_line_naming_the_server_and_no_urllib3_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    with caplog.at_level(logging.DEBUG):
        error, seconds = raised(cli_api(tmp_path, server))
    assert str(error) == f"API server {server} unreachable: Connection refused"
    assert (error.status, error.message) == (0, "Connection refused")
    assert error.summary == "0 Unreachable: Connection refused", "as the lease's why_stale has it"
    assert seconds < 2, "three tries, a tenth and a fifth of a second apart"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()], "urllib3 retries nothing underneath"


def test_a_server_that_accepts_and_never_answers_is_given_up_within_the_cli_budget(
    tmp_path: Path, silent_server: str
) -> None:
    error, seconds = raised(cli_api(tmp_path, silent_server))
    assert str(error) == f"API server {silent_server} unreachable: no answer within 5 s"
    assert 4 < seconds < 7, "one try with what is left of max_delay, not 30 s per try"


def test_refusals_are_one_line_with_status_and_message_never_the_body(
    tmp_path: Path, refusing_server: str
) -> None:
    api = KubeApi(api_client(kubeconfig(tmp_path, refusing_server)), sleep=lambda _: None)
    forbidden, _ = raised(api)
    assert str(forbidden) == f"API server {refusing_server} answered 403 Forbidden: {FORBIDDEN}"
    assert forbidden.away and forbidden.kind == "403"
    bad_gateway, _ = raised(api, "/api/v1/pods")  # retried (5xx), then given up on
    assert str(bad_gateway) == f"API server {refusing_server} answered 502 Bad Gateway"
    assert api.stats.counts[("list", "502")] == api.attempts


def test_tls_against_a_plain_http_server_is_one_line(tmp_path: Path, refusing_server: str) -> None:
    server = refusing_server.replace("http://", "https://")
    error, _ = raised(cli_api(tmp_path, server))
    assert str(error) == f"API server {server} unreachable: TLS: wrong version number"


def test_a_long_or_multiline_message_stays_one_line() -> None:
    error = ApiError(500, "InternalError", "admission webhook said:\n" + "no " * 300, server="https://h:6443")
    assert "\n" not in str(error) and len(str(error)) <= 400 and str(error).endswith("...")
    assert str(ApiError(410, "Expired", "too old")) == "410 Expired: too old", "no server known: as before"


def test_a_watch_against_a_dead_server_logs_once_and_backs_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = f"http://127.0.0.1:{closed_port()}"
    api = KubeApi(api_client(kubeconfig(tmp_path, server)), sleep=lambda _: None)
    informer = Informer(api, "/api/v1/nodes", node_view)
    stop, waits = threading.Event(), []

    def wait(event: threading.Event, seconds: float) -> bool:  # virtual: no time passes
        waits.append(seconds)
        if len(waits) == 8:
            stop.set()
        return event.is_set()

    informer.wait = wait
    api.reachability.clock = lambda: 1000.0
    with caplog.at_level(logging.INFO, logger="upgrader"):
        informer.run(stop)
    assert [r.getMessage() for r in caplog.records] == [
        f"API server {server} unreachable: Connection refused; retrying with backoff (up to 30 s)"
    ]
    ceilings = [min(BACKOFF_CAP_SECONDS, 2.0**n) for n in range(8)]  # 1, 2, 4, ... 30
    assert all(top / 2 <= wait <= top for wait, top in zip(waits, ceilings, strict=True)), waits
    assert api.reachability.condition() == (
        f"API server {server} unreachable: Connection refused (for 0 s)"
    ), "/readyz can say why"
