"""Serve the dispatcher over HTTP/1.1 on loopback, with chunked watch streams."""

from __future__ import annotations

import contextlib
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from upgrader.sim.apiserver.api import Dispatcher, Request, Response


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
            return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            return True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, dispatcher: Dispatcher, host: str = "127.0.0.1", port: int = 0) -> None:
        self.dispatcher = dispatcher
        self.stopping = threading.Event()
        super().__init__((host, port), _Handler)
        dispatcher.server_address = f"{host}:{self.server_address[1]}"

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away (a killed controller, Ctrl-C on a watch) is not a server error."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"
