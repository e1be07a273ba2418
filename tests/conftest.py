"""Network pieces shared by the tests: a port nothing listens on, and a server that never answers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

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
