"""Use the official `kubernetes` client against the emulator without HTTP.

`in_process_client(dispatcher)` returns a `kubernetes.client.ApiClient` whose REST layer calls
the dispatcher directly: same request log, same faults, a virtual clock if the store has one.
A dropped connection surfaces as urllib3's ProtocolError, as it would over a socket.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import urllib3
from kubernetes import client as k8s
from kubernetes.client import rest

from upgrader.sim.apiserver.api import Dispatcher, Request


class _FakeHTTPResponse:
    """The part of urllib3.HTTPResponse the generated client and its watch use."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        status: int,
        headers: dict[str, str],
        data: bytes,
        watcher: Any = None,
        table: Any = None,  # the ResourceType whose Table each event is rendered as
    ) -> None:
        self._dispatcher = dispatcher
        self.status = status
        self.reason = _reason_phrase(status)
        self.headers = urllib3.HTTPHeaderDict(headers)
        self.data = data
        self._watcher = watcher
        self._table = table

    def read(self, *_: Any, **__: Any) -> bytes:
        return self.data

    def json(self) -> Any:
        return json.loads(self.data.decode("utf-8"))

    def getheaders(self) -> urllib3.HTTPHeaderDict:
        return self.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        """A watch yields what is queued now and ends: in-process time does not pass by itself."""
        if self._watcher is None:
            yield self.data
            return
        for event, obj in self._watcher.drain():
            yield self._dispatcher.watch_line(event, obj, self._table)
        self._dispatcher.store.stop_watch(self._watcher)

    def close(self) -> None:
        if self._watcher is not None:
            self._dispatcher.store.stop_watch(self._watcher)

    def release_conn(self) -> None:
        return None


def _reason_phrase(status: int) -> str:
    """The HTTP reason phrase a real server sends (ApiException.reason shows it)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class InProcessREST:
    """Stands in for kubernetes.client.rest.RESTClientObject."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> rest.RESTResponse:
        parts = urlsplit(url)
        hdrs = {k.lower(): str(v) for k, v in (headers or {}).items()}
        content_type = hdrs.get("content-type", "")
        if content_type == "application/json-patch+json" and not isinstance(body, list):
            hdrs["content-type"] = "application/strategic-merge-patch+json"
        if body is None:
            raw = b""
        elif isinstance(body, bytes):
            raw = body
        elif isinstance(body, str):
            raw = body.encode()
        else:
            raw = json.dumps(body).encode()
        response = self.dispatcher.handle(Request(method.upper(), parts.path, parts.query, hdrs, raw))
        if response.drop:
            raise urllib3.exceptions.ProtocolError(
                "Connection aborted.", ConnectionResetError("injected dropped connection")
            )
        return rest.RESTResponse(
            _FakeHTTPResponse(
                self.dispatcher,
                response.status,
                {"Date": self.dispatcher.date(), **response.headers},
                response.body,
                response.watcher,
                response.watch_table,
            )
        )


def in_process_client(dispatcher: Dispatcher, token: str | None = None) -> k8s.ApiClient:
    """`token`: send it as the bearer token (a ServiceAccount's, from `dispatcher.tokens.mint`)."""
    config = k8s.Configuration(host="http://emulator.in-process")
    if token is not None:
        config.api_key = {"authorization": f"Bearer {token}"}
    api = k8s.ApiClient(config)
    api.rest_client = InProcessREST(dispatcher)  # type: ignore[assignment]
    return api
