"""ServiceAccount tokens: the TokenRequest subresource (`kubectl create token`) and the bearer-token
authenticator that RBAC enforcement puts in front of every request.

Tokens are JWTs signed with a key of this emulator (HS256, where kube-apiserver signs RS256): they
carry their ServiceAccount's name and uid and an expiry, and stop working when it passes or when the
ServiceAccount is deleted, as bound tokens do.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.clock import rfc3339
from upgrader.sim.apiserver.store import Store

Obj = dict[str, Any]
ADMIN_TOKEN = "emulator"  # the kubeconfig's (kubeconfig.py): cluster-admin
AUDIENCE = "https://kubernetes.default.svc.cluster.local"  # kube-apiserver's default --api-audiences
DEFAULT_SECONDS = 3600  # TokenRequest's default expirationSeconds
MIN_SECONDS = 600
MAX_SECONDS = 1 << 32
SA_PREFIX = "system:serviceaccount:"
PROTOBUF = "application/vnd.kubernetes.protobuf"
PROTOBUF_MAGIC = b"k8s\x00"


@dataclass(frozen=True)
class User:
    """Who a request is from, as the authenticator tells the authorizer."""

    name: str
    groups: tuple[str, ...]


# No token or the kubeconfig's: the emulator's admin, in system:masters (bound to cluster-admin).
ADMIN = User("kubernetes-admin", ("system:masters", "system:authenticated"))


def service_account_user(namespace: str, name: str) -> User:
    return User(
        f"{SA_PREFIX}{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


def unauthorized() -> errors.ApiError:
    """The authentication filter's answer to a token it does not accept."""
    return errors.ApiError(401, "Unauthorized", reason="Unauthorized")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_HEADER = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())


class TokenIssuer:
    """Issues and verifies this emulator's ServiceAccount tokens; the store is read at each check."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._key = secrets.token_bytes(32)
        self._sa_type = store.type("", "v1", "serviceaccounts")

    def _sign(self, signing_input: str) -> str:
        return _b64(hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest())

    def mint(
        self, namespace: str, name: str, seconds: int = DEFAULT_SECONDS, audiences: list[str] | None = None
    ) -> str:
        """A token for an existing ServiceAccount (404 when there is none), as TokenRequest gives:
        the test helper behind `kubectl create token <name> -n <namespace>`."""
        return self._issue(namespace, name, seconds, audiences or [AUDIENCE])[0]

    def _issue(self, namespace: str, name: str, seconds: int, audiences: list[str]) -> tuple[str, float]:
        account = self.store.get(self._sa_type, namespace, name)
        now = int(self.store.clock.now())
        expiry = now + seconds
        claims = {
            "aud": audiences,
            "exp": expiry,
            "iat": now,
            "nbf": now,
            "iss": AUDIENCE,
            "jti": self.store.new_uid(),
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": name, "uid": account["metadata"].get("uid", "")},
            },
            "sub": f"{SA_PREFIX}{namespace}:{name}",
        }
        signing_input = f"{_HEADER}.{_b64(json.dumps(claims, separators=(',', ':')).encode())}"
        return f"{signing_input}.{self._sign(signing_input)}", float(expiry)

    def token_request(self, namespace: str, name: str, body: Obj) -> Obj:
        """The TokenRequest a POST to serviceaccounts/<name>/token answers (201)."""
        spec = body.get("spec") or {}
        seconds = spec.get("expirationSeconds")
        seconds = DEFAULT_SECONDS if seconds is None else seconds
        if not isinstance(seconds, int) or seconds < MIN_SECONDS or seconds > MAX_SECONDS:
            short = isinstance(seconds, int) and seconds < MIN_SECONDS
            why = "less than 10 minutes" if short else "larger than 2^32 seconds"
            raise _invalid(name, f"Invalid value: {seconds}: may not specify a duration {why}")
        if spec.get("boundObjectRef"):
            raise errors.bad_request("boundObjectRef is not supported by this emulator")
        audiences = list(spec.get("audiences") or [AUDIENCE])
        token, expiry = self._issue(namespace, name, seconds, audiences)
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": None},
            "status": {"token": token, "expirationTimestamp": rfc3339(expiry)},
        }

    def authenticate(self, authorization: str | None) -> User:
        """The user of a request's Authorization header; 401 for a token this server did not issue,
        one expired, for another audience, or whose ServiceAccount is gone (or was recreated)."""
        if authorization is None:
            return ADMIN
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer":
            raise unauthorized()
        if token == ADMIN_TOKEN:
            return ADMIN
        claims = self._verify(token)
        bound = claims.get("kubernetes.io") or {}
        namespace = bound.get("namespace", "")
        account = bound.get("serviceaccount") or {}
        stored = self.store.find(self._sa_type, namespace, account.get("name", ""))
        if stored is None or stored["metadata"].get("uid", "") != account.get("uid"):
            raise unauthorized()
        return service_account_user(namespace, account["name"])

    def _verify(self, token: str) -> Obj:
        parts = token.split(".")
        if len(parts) != 3 or not hmac.compare_digest(parts[2], self._sign(f"{parts[0]}.{parts[1]}")):
            raise unauthorized()
        claims: Obj = json.loads(_unb64(parts[1]))
        now = self.store.clock.now()
        if not claims.get("nbf", 0) <= now < claims.get("exp", 0) or AUDIENCE not in claims.get("aud", ()):
            raise unauthorized()
        return claims


# ----- kubectl's protobuf TokenRequest -------------------------------------------------------
# kubectl's typed client sends `create token` as protobuf (and takes JSON back): only the few fields
# of TokenRequest.spec are read (generated.proto: audiences 1, boundObjectRef 3, expirationSeconds 4).


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            length, i = _varint(data, i)
            value, i = data[i : i + length], i + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = data[i : i + size], i + size
        else:
            raise ValueError(f"wire type {wire}")
        yield number, value


def _field(data: bytes, number: int) -> bytes:
    return next((v for n, v in _fields(data) if n == number and isinstance(v, bytes)), b"")


def protobuf_token_request(raw: bytes) -> Obj:
    """A TokenRequest sent as application/vnd.kubernetes.protobuf, as the JSON body it stands for."""
    if not raw.startswith(PROTOBUF_MAGIC):
        raise errors.bad_request("the body of the request is not a Kubernetes protobuf message")
    try:
        spec: Obj = {}
        for number, value in _fields(_field(_field(raw[len(PROTOBUF_MAGIC) :], 2), 2)):
            if number == 1 and isinstance(value, bytes):
                spec.setdefault("audiences", []).append(value.decode())
            elif number == 3:
                spec["boundObjectRef"] = {"given": True}
            elif number == 4 and isinstance(value, int):
                spec["expirationSeconds"] = value - (1 << 64) if value >= 1 << 63 else value
    except (IndexError, ValueError) as exc:
        raise errors.bad_request(f"the body of the request could not be decoded as protobuf: {exc}") from exc
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


def _invalid(name: str, message: str) -> errors.ApiError:
    field = "spec.expirationSeconds"
    return errors.ApiError(
        422,
        f'TokenRequest.authentication.k8s.io "{name}" is invalid: {field}: {message}',
        details={
            "name": name,
            "group": "authentication.k8s.io",
            "kind": "TokenRequest",
            "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}],
        },
    )
