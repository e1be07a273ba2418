"""The Kubernetes API as plain JSON, with transient faults retried in one place.

Retried (tenacity, honouring Retry-After): 5xx, 429 from the API server's own throttling, dropped
connections and timeouts. Not retried: 409 (the caller re-reads on its next pass), 404, 422, and a
429 from the eviction subresource naming a PodDisruptionBudget, which is a domain answer. urllib3
retries nothing underneath (`client.api_client` turns its retries off), and one call, retries and
timeouts included, lasts about `max_delay` at most: each try's timeout is what is left of it.

An `ApiError`'s `str()` is one line naming the API server and what went wrong, never an HTTP dump or
a urllib3 repr: `API server https://10.0.0.1:6443 unreachable: Connection refused`,
`API server https://10.0.0.1:6443 answered 403 Forbidden: nodes is forbidden: ...`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_after_delay

from upgrader.kube.reachability import Reachability, reachability_of
from upgrader.kube.server_clock import ServerClock, server_clock_of

Obj = dict[str, Any]
PDB_CAUSE = "DisruptionBudget"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
WATCH_CONNECT_SECONDS = 10  # a watch's connect timeout; its read timeout is the watch's own plus this
NO_ANSWER = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)  # raised before any HTTP status
MIN_TRY_SECONDS = 1.0  # the shortest timeout a try gets, however little is left of `max_delay`
LONGEST_LINE = 400  # characters of an error's one line; an admission webhook can say a lot
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^\"')\]]+)")


class ApiError(Exception):
    """A non-2xx answer after retries; `status` 0 means no answer at all. `server` is the API server's
    URL (empty when not known, e.g. an error event inside a watch stream)."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None, server: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        self.server = server
        super().__init__(self._line())

    @property
    def pdb_refusal(self) -> bool:
        causes = (self.body.get("details") or {}).get("causes") or []
        return self.status == 429 and any(c.get("reason") == PDB_CAUSE for c in causes)

    @property
    def away(self) -> bool:
        """No answer, or a refusal that is about us or the API server rather than the object asked for
        (401, 403, throttling, 5xx): worth backing off for, said once (see reachability.py)."""
        throttled = self.status == 429 and not self.pdb_refusal
        return self.status == 0 or self.status in (401, 403) or throttled or self.status >= 500

    @property
    def kind(self) -> str:
        """`unreachable`, or the HTTP status: a change of kind is a change of the API server's condition."""
        return "unreachable" if self.status == 0 else str(self.status)

    @property
    def summary(self) -> str:
        """`<status> <reason>: <message>` without the server (`0 Unreachable: Connection refused`)."""
        return _one_line(f"{self.status} {self.reason}: {self.message}")

    def _line(self) -> str:
        if not self.server:
            return self.summary
        if self.status == 0:
            return _one_line(f"API server {self.server} unreachable: {self.message}")
        what = f"{self.status} {self.reason}".strip()
        if self.message and self.message != self.reason:
            what += f": {self.message}"
        return _one_line(f"API server {self.server} answered {what}")


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= LONGEST_LINE else text[: LONGEST_LINE - 3] + "..."


def no_answer(exc: BaseException, timeout: float, connect: float | None = None) -> str:
    """What became of a request that got no HTTP answer, in a few words: the OS's when it has some
    (`Connection refused`), else plain ones; no urllib3 reprs. `timeout` is the try's timeout
    (`connect` its connect timeout, when different)."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    if isinstance(exc, urllib3.exceptions.NewConnectionError):  # a ConnectTimeoutError subclass, for history
        found = _ERRNO.search(str(exc))
        return found.group(1).strip() if found else _one_line(str(exc).split(": ", 1)[-1])
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return f"no connection within {_seconds(timeout if connect is None else connect)} s"
    if isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError):
        return f"no answer within {_seconds(timeout)} s"
    if isinstance(exc, urllib3.exceptions.SSLError):
        return tls_failure(str(exc))
    found = _ERRNO.search(str(exc))
    if found:
        return found.group(1).strip()
    for arg in exc.args:  # ProtocolError("Connection aborted.", ConnectionResetError(...))
        if isinstance(arg, OSError):
            return arg.strerror or str(arg) or type(arg).__name__
    return _one_line(str(exc)) or type(exc).__name__


def _seconds(value: float) -> str:
    return f"{round(value, 1):g}"


def tls_failure(text: str) -> str:
    """`TLS: certificate verify failed: self-signed certificate` from an SSL error's text."""
    found = re.search(r"\[SSL(?:: [A-Z_]+)?\] ([^(\"')]+)", text)
    return "TLS: " + (found.group(1).strip() if found else _one_line(text.removeprefix("SSLError")))


@dataclass
class CallStats:
    """Requests sent per verb and outcome, for metrics and the per-pass request budget."""

    counts: dict[tuple[str, str], int]

    def add(self, verb: str, outcome: str) -> None:
        self.counts[(verb, outcome)] = self.counts.get((verb, outcome), 0) + 1


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        if exc.status == 429:
            return not _is_pdb_refusal(exc)
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def _is_pdb_refusal(exc: ApiException) -> bool:
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return False
    return any(c.get("reason") == PDB_CAUSE for c in (body.get("details") or {}).get("causes") or [])


def _retry_after(state: RetryCallState) -> float:
    """Retry-After when the server sent one (capped), else exponential backoff from 0.1 s."""
    exc = state.outcome.exception() if state.outcome else None
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value:
        try:
            return min(float(value), 10.0)
        except ValueError:
            pass
    return float(min(0.1 * 2 ** (state.attempt_number - 1), 2.0))


class KubeApi:
    """Thin JSON access on top of the official client's ApiClient (auth, TLS, kubeconfig)."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        sleep: Callable[[float], None] = time.sleep,
        attempts: int = 6,
        max_delay: float = 20.0,
        timeout: float = 30.0,
    ) -> None:
        self.client = api_client
        self.sleep = sleep
        self.attempts = attempts
        self.max_delay = max_delay
        self.timeout = timeout
        self.stats = CallStats({})
        self.on_request: Callable[[str, str], None] | None = None
        self.server = str(api_client.configuration.host)
        # Shared with every KubeApi on the same client: the loop and the watches report to it.
        self.reachability: Reachability = reachability_of(api_client)
        # The API server's clock, read from its answers: what every stamp and wait runs on (server_clock.py).
        self.server_clock: ServerClock = server_clock_of(api_client)
        # The last error raised that means the API server is away (the loop clears it before a pass).
        self.last_away: ApiError | None = None

    # ----- core request -------------------------------------------------------------------------

    def request(
        self,
        verb: str,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        retrying = Retrying(
            retry=retry_if_exception(_transient),
            wait=_retry_after,
            sleep=self.sleep,
            reraise=True,
            stop=stop_after_attempt(self.attempts) | stop_after_delay(self.max_delay),
        )
        deadline = time.monotonic() + self.max_delay
        timeout = self.timeout
        attempt: object = None
        try:
            for attempt in retrying:
                with attempt:
                    timeout = self._try_timeout(deadline)
                    return self._once(verb, method, path, query, body, content_type, timeout)
        except ApiException as exc:
            error = self._error(exc)
            exc.__traceback__ = None
        except NO_ANSWER as exc:
            error = ApiError(0, "Unreachable", no_answer(exc, timeout), server=self.server)
            exc.__traceback__ = None
        # Raised with no reference left to the failed tries. tenacity re-raises the last try's
        # exception from inside its iterator, whose frame holds the retry state that holds that
        # exception: exception, traceback and frames would hold one another, and with them every
        # caller's locals (a pass's whole snapshot, through the frames' f_back), until the cyclic
        # collector found them. A 404 in every pass (no ClusterPolicy, no control ConfigMap) kept
        # each pass's reads alive that way, and the collection that freed them scanned them all.
        del retrying, attempt
        try:
            raise self._failed(error)
        finally:
            del error

    def _try_timeout(self, deadline: float) -> float:
        """A try's timeout: `timeout`, or what is left of `max_delay` when less (a CLI command's few
        seconds bound a server that accepts and never answers, not only one that refuses)."""
        return min(self.timeout, max(deadline - time.monotonic(), MIN_TRY_SECONDS))

    def _failed(self, error: ApiError) -> ApiError:
        if error.away:
            self.last_away = error
        return error

    def _once(
        self,
        verb: str,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        content_type: str,
        timeout: float,
    ) -> Obj:
        url = self.client.configuration.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {**self.client.default_headers, "Accept": "application/json", "Content-Type": content_type}
        self.client.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        local = self.server_clock.local
        try:
            sent = local()
            response = self.client.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout)
            data = response.read()
            self.server_clock.observe(response.getheader("Date"), sent, local())
        except ApiException as exc:
            self._count(verb, "unreachable" if not exc.status else str(exc.status))
            raise
        except NO_ANSWER:
            self._count(verb, "unreachable")
            raise
        if not 200 <= response.status <= 299:
            self._count(verb, str(response.status))
            raise ApiException(http_resp=response)
        self._count(verb, "ok")
        return json.loads(data) if data else {}

    def _count(self, verb: str, outcome: str) -> None:
        self.stats.add(verb, outcome)
        if self.on_request is not None:
            self.on_request(verb, outcome)

    def _error(self, exc: ApiException) -> ApiError:
        if not exc.status:  # the client's own failure before any answer (its SSLError, say)
            return ApiError(0, "Unreachable", tls_failure(str(exc.reason or "")), server=self.server)
        try:
            body = json.loads(exc.body or "{}")
        except ValueError:
            body = {}  # not a Status: a proxy's HTML page, say; its reason phrase says enough
        if not isinstance(body, dict):
            body = {}
        return ApiError(
            int(exc.status),
            str(body.get("reason") or exc.reason or ""),
            str(body.get("message") or exc.reason or ""),
            body,
            self.server,
        )

    # ----- reads --------------------------------------------------------------------------------

    def list(
        self,
        path: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Obj:
        """One LIST; with `limit`, one page of it (`metadata.continue` names the next)."""
        query = {
            "labelSelector": label_selector or None,
            "fieldSelector": field_selector or None,
            "limit": limit,
            "continue": continue_token,
        }
        return self.request("list", "GET", path, query)

    def get(self, path: str) -> Obj | None:
        try:
            return self.request("get", "GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    # ----- writes -------------------------------------------------------------------------------

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("create", "POST", path, body=body)

    def replace(self, path: str, body: Obj) -> Obj:
        return self.request("update", "PUT", path, body=body)

    def patch(self, path: str, patch: Any, content_type: str = MERGE) -> Obj:
        return self.request("patch", "PATCH", path, body=patch, content_type=content_type)

    def delete(self, path: str, body: Obj | None = None) -> Obj:
        return self.request("delete", "DELETE", path, body=body)

    def evict(self, namespace: str, name: str, uid: str) -> Obj:
        return self.create(
            f"/api/v1/namespaces/{namespace}/pods/{quote(name)}/eviction",
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": uid}},
            },
        )

    # ----- watch --------------------------------------------------------------------------------

    def watch(
        self, path: str, resource_version: str, timeout_seconds: int, label_selector: str | None = None
    ) -> Iterator[Obj]:
        """Open a watch (raising ApiError at once when it is refused or gets no answer), then stream its
        events until the server ends the stream; no retries (the caller loops)."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": "true",
            "labelSelector": label_selector or None,
        }
        url = (
            self.client.configuration.host
            + path
            + "?"
            + urlencode({k: v for k, v in query.items() if v is not None})
        )
        headers = {**self.client.default_headers, "Accept": "application/json"}
        self.client.update_params_for_auth(headers, [], ["BearerToken"], path, "GET", None)
        connect = WATCH_CONNECT_SECONDS
        try:
            response = self.client.call_api(
                "GET", url, header_params=headers, _request_timeout=(connect, timeout_seconds + connect)
            )
        except ApiException as exc:  # 410 Gone: that version is compacted away; the caller lists again
            self._count("watch", "unreachable" if not exc.status else str(exc.status))
            raise self._failed(self._error(exc)) from None
        except NO_ANSWER as exc:
            self._count("watch", "unreachable")
            cause = no_answer(exc, timeout_seconds + connect, connect)
            raise self._failed(ApiError(0, "Unreachable", cause, server=self.server)) from None
        self._count("watch", "ok" if response.status == 200 else str(response.status))
        if response.status != 200:
            text = (response.read() or b"").decode("utf-8", "replace")
            refused = ApiException(status=response.status, reason=response.reason, body=text or None)
            raise self._failed(self._error(refused))
        return self._stream(response.response)

    @staticmethod
    def _stream(raw: Any) -> Iterator[Obj]:
        buffer = b""
        try:
            for chunk in raw.stream(amt=None, decode_content=False):
                buffer += chunk if isinstance(chunk, bytes) else chunk.encode()
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            raw.close()
            raw.release_conn()
