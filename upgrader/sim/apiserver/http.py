"""Serve the dispatcher over HTTP/1.1 on loopback, with chunked watch streams.

With `dispatcher.https` set (`upgrader sim serve --enforce-rbac` sets it) it serves HTTPS, with a
self-signed certificate made by the openssl command: kubectl sends a bearer token (`--token`, the
kubeconfig's) only to an https server. `EmulatorHTTPServer.write_kubeconfig` then trusts it.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import select
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from upgrader.sim.apiserver.api import Dispatcher, Request, Response
from upgrader.sim.apiserver.kubeconfig import write_kubeconfig


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall
    server: EmulatorHTTPServer

    def log_message(self, format: str, *args: object) -> None:
        return  # the dispatcher's request log is the record

    def date_time_string(self, timestamp: float | None = None) -> str:
        return self.server.dispatcher.date()  # the emulator's clock, virtual or not

    def _handle(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        response = self.server.dispatcher.handle(Request(self.command, path, query, headers, body))
        if response.drop:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if response.watcher is not None:
            self._stream(response)
            return
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        self.wfile.write(response.body)

    def _stream(self, response: Response) -> None:
        watcher = response.watcher
        assert watcher is not None
        dispatcher = self.server.dispatcher
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + response.watch_timeout
        try:
            while not self.server.stopping.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                event = watcher.get(timeout=min(remaining, 0.5))
                if event is None:
                    if watcher.closed or self._peer_closed():
                        break
                    continue
                line = dispatcher.watch_line(event[0], event[1], response.watch_table)
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            dispatcher.store.stop_watch(watcher)
            self.close_connection = True

    def _peer_closed(self) -> bool:
        """Whether the client hung up (kubectl -w interrupted): a quiet watch would never notice."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable and isinstance(self.connection, ssl.SSLSocket):
                return self._tls_peer_closed(self.connection)
            return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            return True

    @staticmethod
    def _tls_peer_closed(conn: ssl.SSLSocket) -> bool:
        """TLS cannot peek: read (a watching client sends nothing but its close_notify)."""
        timeout = conn.gettimeout()
        conn.settimeout(0)
        try:
            return not conn.recv(1)
        except (ssl.SSLWantReadError, BlockingIOError):
            return False  # part of a record: not a hang-up yet
        finally:
            conn.settimeout(timeout)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self, dispatcher: Dispatcher, host: str = "127.0.0.1", port: int = 0, tls: bool | None = None
    ) -> None:
        """`tls`: serve HTTPS (default: `dispatcher.https`)."""
        self.dispatcher = dispatcher
        self.stopping = threading.Event()
        self.tls: tuple[ssl.SSLContext, bytes] | None = None
        if dispatcher.https if tls is None else tls:
            self.tls = _self_signed()
        super().__init__((host, port), _Handler)
        dispatcher.server_address = f"{host}:{self.server_address[1]}"

    def finish_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        """The TLS handshake in the connection's own thread, so a slow client holds up no other."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        try:
            conn = self.tls[0].wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # a client that gave up, or does not trust the certificate
        try:
            super().finish_request(conn, client_address)
        finally:
            self.shutdown_request(conn)

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> Path:
        """A kubeconfig for this server; over TLS it carries the certificate as its authority."""
        target = write_kubeconfig(path, self.url)
        if self.tls is not None:
            config = yaml.safe_load(target.read_text())
            authority = base64.b64encode(self.tls[1]).decode()
            config["clusters"][0]["cluster"]["certificate-authority-data"] = authority
            target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away (a killed controller, Ctrl-C on a watch) is not a server error."""
        if isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"


@functools.cache
def _self_signed() -> tuple[ssl.SSLContext, bytes]:
    """A TLS context for 127.0.0.1/localhost and its certificate (PEM), made once per process."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("serving HTTPS (needed for bearer tokens under RBAC) needs the openssl command")
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(cert), "-days", "3650", "-subj", "/CN=upgrader-sim",
             "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.set_alpn_protocols(["http/1.1"])  # no HTTP/2
        return context, cert.read_bytes()
