"""Requests in, responses out: the REST surface of the emulator, independent of any transport.

Both the HTTP server and the in-process client adapter call `Dispatcher.handle`, so faults, the
request log and API semantics are the same whichever way a test talks to the emulator.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qs

from upgrader.sim.apiserver import errors, printer_columns, tables
from upgrader.sim.apiserver.discovery import discovery_document
from upgrader.sim.apiserver.events_v1 import EventsV1View, is_view
from upgrader.sim.apiserver.eviction import evict
from upgrader.sim.apiserver.faults import FaultPlan, RequestLog, RequestRecord
from upgrader.sim.apiserver.rbac import Authorizer
from upgrader.sim.apiserver.registry import ResourceType
from upgrader.sim.apiserver.store import Store
from upgrader.sim.apiserver.tokens import PROTOBUF, TokenIssuer, protobuf_token_request
from upgrader.sim.apiserver.watch import Watcher, parse_resource_version

Obj = dict[str, Any]
JSON = "application/json"
HEALTH_PATHS = ("/healthz", "/readyz", "/livez")


@dataclass
class Request:
    method: str
    path: str
    query: str = ""
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""

    def params(self) -> dict[str, str]:
        return {k: v[-1] for k, v in parse_qs(self.query, keep_blank_values=True).items()}


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": JSON})
    watcher: Watcher | None = None  # a watch: stream events from here
    watch_timeout: float = 1800.0
    watch_table: ResourceType | None = None  # the type whose Table each event's object is rendered as
    drop: bool = False  # an injected dropped connection: send nothing


@dataclass(frozen=True)
class Target:
    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _bool(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


class Dispatcher:
    def __init__(
        self,
        store: Store,
        faults: FaultPlan | None = None,
        log: RequestLog | None = None,
        enforce_rbac: bool = False,
    ) -> None:
        self.store = store
        self.faults = faults
        self.log = log if log is not None else RequestLog()  # an empty log is falsy: keep its audit
        self.server_address = "127.0.0.1:0"
        self.events_v1 = EventsV1View(store)
        self.tokens = TokenIssuer(store)  # TokenRequest is served either way; tokens count only under RBAC
        # None: no authentication or authorisation at all (the default; see rbac.py).
        self.rbac: Authorizer | None = Authorizer(store, self.tokens) if enforce_rbac else None
        self.https = False  # serve HTTPS (http.py): kubectl sends a bearer token only to an https server

    # ----- entry point ----------------------------------------------------------------------

    def date(self) -> str:
        """The `Date` header of an answer: the emulator's clock, as kube-apiserver dates its answers."""
        return formatdate(self.store.clock.now(), usegmt=True)

    def handle(self, req: Request) -> Response:
        self.store.run_due()
        record = RequestRecord(
            0,
            self.store.clock.now(),
            "",
            req.method,
            req.path,
            req.query,
            0,
            user_agent=req.headers.get("user-agent", ""),
        )
        try:
            if self.rbac is not None:  # off, this check is the whole cost
                self.rbac.check(req, record)
            response = self._discovery(req)
            if response is None:
                response = self._resource(req, record)
        except errors.ApiError as exc:
            response = Response(exc.code, encode(exc.body()), {"Content-Type": JSON, **exc.headers})
        record.status = 0 if response.drop else response.status
        self.log.add(record)
        return response

    # ----- discovery ------------------------------------------------------------------------

    def _discovery(self, req: Request) -> Response | None:
        if req.method != "GET":
            return None
        path = req.path.rstrip("/") or "/"
        if path in HEALTH_PATHS:
            return Response(200, b"ok", {"Content-Type": "text/plain"})
        document = discovery_document(path, self.store.registry, self.server_address)
        return None if document is None else Response(200, encode(document))

    # ----- resources ------------------------------------------------------------------------

    def parse_target(self, path: str) -> Target:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts and parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.ApiError(404, "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise errors.ApiError(404, "the server could not find the requested resource")
        rtype = self.store.registry.lookup(group, version, rest[0])
        if rtype is None or (namespace is not None and not rtype.namespaced):
            raise errors.ApiError(404, "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (
            sub is not None
            and sub not in rtype.subresources
            and not (rtype.kind == "Pod" and sub == "eviction")
            and not (rtype.key == ("", "serviceaccounts") and sub == "token")
        ):
            raise errors.ApiError(404, "the server could not find the requested resource")
        return Target(rtype, namespace, name, sub)

    def _resource(self, req: Request, record: RequestRecord) -> Response:
        target = self.parse_target(req.path)
        params = req.params()
        verb = self._verb(req.method, target, params)
        record.verb, record.resource = verb, target.rtype.plural
        record.namespace, record.name = target.namespace or "", target.name or ""
        record.subresource = target.subresource or ""
        if target.subresource == "token" and req.headers.get("content-type", "").startswith(PROTOBUF):
            body: Any = protobuf_token_request(req.body)  # how kubectl create token sends it
        else:
            body = self._decode(req.body) if req.body else None
        if verb in ("create", "update", "patch", "delete"):
            record.body = body
        if _bool(params.get("dryRun")) or params.get("dryRun") == "All":
            raise errors.bad_request("dryRun is not supported by this emulator")
        fault = self._draw(verb)
        if fault is not None:
            record.fault = fault
            if fault == "drop":
                return Response(0, drop=True)
            raise self._fault_error(fault, verb, target)
        return self._serve(verb, target, params, req, body)

    def _verb(self, method: str, target: Target, params: dict[str, str]) -> str:
        if method == "GET":
            if target.name is None:
                return "watch" if _bool(params.get("watch")) else "list"
            return "get"
        verbs = {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if target.name else "deletecollection",
        }
        posts_to_object = method == "POST" and target.name and target.subresource not in ("eviction", "token")
        if method not in verbs or posts_to_object:
            raise errors.ApiError(405, "the server does not allow this method on the requested resource")
        return verbs[method]

    def _draw(self, verb: str) -> str | None:
        """The fault to inject into this request, if any, after the plan's added latency."""
        if self.faults is None:
            return None
        fault, latency = self.faults.draw(verb)
        if latency > 0 and not getattr(self.store.clock, "virtual", False):
            time.sleep(latency)
        return fault

    def _fault_error(self, fault: str, verb: str, target: Target) -> errors.ApiError:
        if fault == "throttle429":
            assert self.faults is not None
            rates = self.faults.rates[verb]
            return errors.ApiError(
                429,
                "Too many requests, please try again later.",
                reason="TooManyRequests",
                details={"retryAfterSeconds": rates.retry_after},
                headers={"Retry-After": str(rates.retry_after)},
            )
        if fault == "conflict409":
            return errors.conflict(target.rtype.plural, target.rtype.group, target.name or "")
        return errors.ApiError(500, "Internal error occurred: injected fault")

    @staticmethod
    def _decode(raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise errors.bad_request(f"the body of the request could not be decoded as JSON: {exc}") from exc

    def _objects(self, rtype: ResourceType) -> Store | EventsV1View:
        """Where a type's objects are read and written: the store, or a view over another type's."""
        return self.events_v1 if is_view(rtype) else self.store

    def _serve(self, verb: str, target: Target, params: dict[str, str], req: Request, body: Any) -> Response:
        store, rtype = self.store, target.rtype
        objects = self._objects(rtype)
        accept = req.headers.get("accept", "")
        wanted = params.get("resourceVersion") or "0"
        # A custom resource's unknown fields are refused, not pruned, when the client asks (kubectl does).
        strict = rtype.custom and params.get("fieldValidation") == "Strict"
        if verb in ("list", "get") and wanted != "0" and parse_resource_version(wanted) > store.resource_version:
            # Not reached yet (a client that saw a server since restored from an older backup).
            raise errors.too_large_resource_version(int(wanted), store.resource_version)
        if verb == "list":
            result = objects.list(
                rtype,
                target.namespace,
                params.get("labelSelector"),
                params.get("fieldSelector"),
                int(params.get("limit") or 0),
                params.get("continue") or None,
            )
            list_meta: Obj = {"resourceVersion": result.resource_version}
            if result.continue_token:
                list_meta["continue"] = result.continue_token
                if result.remaining is not None:
                    list_meta["remainingItemCount"] = result.remaining
            if tables.wants_table(accept):
                return Response(
                    200,
                    encode(
                        printer_columns.render(
                            rtype,
                            result.items,
                            store.clock.now(),
                            list_meta,
                            params.get("includeObject", "Metadata"),
                        )
                    ),
                    {"Content-Type": "application/json;as=Table;v=v1;g=meta.k8s.io"},
                )
            return Response(
                200,
                encode(
                    {
                        "kind": rtype.list_kind_name(),
                        "apiVersion": rtype.api_version,
                        "metadata": list_meta,
                        "items": result.items,
                    }
                ),
            )
        if verb == "watch":
            watcher = objects.watch(
                rtype,
                target.namespace,
                params.get("labelSelector"),
                params.get("fieldSelector"),
                params.get("resourceVersion"),
            )
            timeout = float(params.get("timeoutSeconds") or 1800)
            return Response(
                200,
                headers={"Content-Type": JSON, "Transfer-Encoding": "chunked"},
                watcher=watcher,
                watch_timeout=timeout,
                watch_table=rtype if tables.wants_table(accept) else None,
            )
        assert target.name is not None or verb in ("create", "deletecollection")
        if verb == "get":
            obj = objects.get(rtype, target.namespace, target.name or "")
            if tables.wants_table(accept):
                return Response(
                    200,
                    encode(
                        printer_columns.render(
                            rtype, [obj], store.clock.now(), {}, params.get("includeObject", "Metadata")
                        )
                    ),
                )
            return Response(200, encode(obj))
        if verb == "create":
            if not isinstance(body, dict):
                raise errors.bad_request("request body must be a JSON object")
            if target.subresource == "eviction":
                return Response(201, encode(evict(store, target.namespace or "", target.name or "", body)))
            if target.subresource == "token":
                return Response(201, encode(self.tokens.token_request(target.namespace or "", target.name or "", body)))
            if strict:
                return Response(201, encode(store.create(rtype, target.namespace, body, strict=True)))
            return Response(201, encode(objects.create(rtype, target.namespace, body)))
        if verb == "update":
            if not isinstance(body, dict):
                raise errors.bad_request("request body must be a JSON object")
            if strict:
                replaced = store.replace(rtype, target.namespace, target.name or "", body, target.subresource, True)
                return Response(200, encode(replaced))
            return Response(
                200,
                encode(objects.replace(rtype, target.namespace, target.name or "", body, target.subresource)),
            )
        if verb == "patch":
            ctype = req.headers.get("content-type", "")
            if strict:
                patched = store.patch(rtype, target.namespace, target.name or "", ctype, body, target.subresource, True)
                return Response(200, encode(patched))
            return Response(
                200,
                encode(
                    objects.patch(rtype, target.namespace, target.name or "", ctype, body, target.subresource)
                ),
            )
        options = body if isinstance(body, dict) else {}
        grace = options.get("gracePeriodSeconds", params.get("gracePeriodSeconds"))
        propagation = options.get("propagationPolicy") or params.get("propagationPolicy")
        if verb == "delete":
            return Response(
                200,
                encode(
                    objects.delete(
                        rtype,
                        target.namespace,
                        target.name or "",
                        int(grace) if grace not in (None, "") else None,
                        options.get("preconditions"),
                        propagation,
                    )
                ),
            )
        # deletecollection
        items = objects.list(
            rtype, target.namespace, params.get("labelSelector"), params.get("fieldSelector")
        ).items
        for obj in items:
            m = obj["metadata"]
            objects.delete(
                rtype, m.get("namespace"), m["name"], int(grace) if grace not in (None, "") else None
            )
        return Response(
            200,
            encode(
                {
                    "kind": rtype.list_kind_name(),
                    "apiVersion": rtype.api_version,
                    "metadata": {"resourceVersion": str(store.resource_version)},
                    "items": items,
                }
            ),
        )

    # ----- watch events ---------------------------------------------------------------------

    def watch_line(self, event: str, obj: Obj, table_type: ResourceType | None) -> bytes:
        """One line of a watch stream."""
        payload = obj
        if table_type is not None and event != "ERROR":  # an ERROR carries a Status as it is
            payload = printer_columns.render(
                table_type,
                [obj],
                self.store.clock.now(),
                {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            )
        return encode({"type": event, "object": payload}) + b"\n"
