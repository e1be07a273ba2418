"""The Kubernetes API as plain JSON, with transient faults retried in one place.

Retried (tenacity, honouring Retry-After): 5xx, 429 from the API server's own throttling, dropped
connections and timeouts. Not retried: 409 (the caller re-reads on its next pass), 404, 422, and a
429 from the eviction subresource naming a PodDisruptionBudget, which is a domain answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_after_delay

Obj = dict[str, Any]
PDB_CAUSE = "DisruptionBudget"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class ApiError(Exception):
    """A non-2xx answer after retries; `status` 0 means no answer at all."""

    def __init__(self, status: int, reason: str, message: str, body: Obj | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def pdb_refusal(self) -> bool:
        causes = (self.body.get("details") or {}).get("causes") or []
        return self.status == 429 and any(c.get("reason") == PDB_CAUSE for c in causes)


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
        try:
            for attempt in retrying:
                with attempt:
                    return self._once(verb, method, path, query, body, content_type)
        except ApiException as exc:
            raise self._error(exc) from None
        except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as exc:
            raise ApiError(0, "Unreachable", str(exc)) from None
        raise AssertionError("unreachable")  # pragma: no cover - Retrying either returns or raises

    def _once(
        self, verb: str, method: str, path: str, query: dict[str, Any] | None, body: Any, content_type: str
    ) -> Obj:
        url = self.client.configuration.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {**self.client.default_headers, "Accept": "application/json", "Content-Type": content_type}
        self.client.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        try:
            response = self.client.call_api(
                method, url, header_params=headers, body=body, _request_timeout=self.timeout
            )
            data = response.read()
        except ApiException as exc:
            self._count(verb, str(exc.status))
            raise
        except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError):
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

    @staticmethod
    def _error(exc: ApiException) -> ApiError:
        try:
            body = json.loads(exc.body or "{}")
        except ValueError:
            body = {}
        return ApiError(
            int(exc.status or 0),
            str(body.get("reason") or exc.reason or ""),
            str(body.get("message") or exc.reason or ""),
            body,
        )

    # ----- reads --------------------------------------------------------------------------------

    def list(self, path: str, label_selector: str | None = None, field_selector: str | None = None) -> Obj:
        query = {"labelSelector": label_selector or None, "fieldSelector": field_selector or None}
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
        """Stream watch events until the server ends the stream; no retries (the caller loops)."""
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
        try:
            response = self.client.call_api(
                "GET", url, header_params=headers, _request_timeout=(10, timeout_seconds + 10)
            )
        except ApiException as exc:  # 410 Gone: that version is compacted away; the caller lists again
            self._count("watch", str(exc.status))
            raise self._error(exc) from None
        raw = response.response
        self._count("watch", "ok" if response.status == 200 else str(response.status))
        if response.status != 200:
            response.read()
            raise ApiError(response.status, str(response.reason or ""), f"watch {path}: HTTP {response.status}")
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
