"""A TCP proxy between one controller and the API server that can cut it off: a network partition.

The controller behind it stays alive (and scraped) while none of its requests reach the API server:
its renewals fail, its Lease expires and another replica takes over.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class PartitionProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.cut = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def partition(self) -> None:
        """Drop every connection, watches included, and refuse new ones until `heal`."""
        self.cut.set()
        with self._lock:
            for sock in self._open:
                _close(sock)
            self._open.clear()

    def heal(self) -> None:
        self.cut.clear()

    def close(self) -> None:
        self.partition()
        _close(self.server)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.cut.is_set():
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while not self.cut.is_set():
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
