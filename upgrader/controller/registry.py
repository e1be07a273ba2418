"""Observe for the preflight's registry check: does the registry hold a precompiled driver image?

An OCI distribution `HEAD /v2/<repository>/manifests/<tag>`, as a container runtime would resolve
the tag before pulling it. A 401 answered with `WWW-Authenticate: Bearer realm=...,service=...` is
the token exchange public registries (nvcr.io, Docker Hub, ghcr.io) use: GET the realm with the
service and `repository:<repo>:pull` scope (anonymously, or with the credentials of the policy's
pull secrets, `kubernetes.io/dockerconfigjson`), then HEAD again with the token. A `Basic`
challenge gets the credentials directly. Answers are cached (`cacheSeconds`); an answer the
registry could not give (unreachable, refused, denied) is cached for a few seconds only, and holds
the node meanwhile (core/fleet/preflight.py fails closed on it). One line says why, never an exception.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3

from upgrader.controller.alert_source import failure_cause, flat_line
from upgrader.core.fleet.preflight import ABSENT, PRESENT, RegistryAnswer
from upgrader.core.policy.preflight_policy import RegistryCheck

MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
DOCKER_HUB = "registry-1.docker.io"
UNKNOWN_SECONDS = 15.0  # an answer the registry could not give is asked again this soon
TOKEN_MAX_BYTES = 1024 * 1024
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')

Credentials = Mapping[str, tuple[str, str]]  # registry host -> (username, password)


@dataclass(frozen=True)
class ImageName:
    host: str
    repository: str
    tag: str


def split_reference(reference: str) -> ImageName:
    """`nvcr.io/nvidia/driver:550-...` -> host, repository, tag; Docker Hub's short names expanded."""
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag:
        raise ValueError(f"{reference!r} has no tag")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return ImageName(first, rest, tag)
    return ImageName(DOCKER_HUB, name if rest else f"library/{name}", tag)


class Registry:
    """The registries one policy names, asked with one connection pool across passes."""

    def __init__(
        self,
        check: RegistryCheck,
        clock: Callable[[], float],
        credentials: Callable[[], Credentials] = dict,
    ) -> None:
        self.check = check
        self.clock = clock
        self.credentials = credentials  # read when a registry is asked, not once: secrets rotate
        self.pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=float(check.timeout_seconds)))
        self.cache: dict[str, tuple[RegistryAnswer, float]] = {}  # reference -> answer, until
        self.asked = 0  # HEADs sent, for tests and the log

    def answers(self, references: Iterable[str]) -> dict[str, RegistryAnswer]:
        now = self.clock()
        out: dict[str, RegistryAnswer] = {}
        creds: Credentials | None = None
        for reference in sorted(set(references)):
            cached = self.cache.get(reference)
            if cached is not None and now < cached[1]:
                out[reference] = cached[0]
                continue
            if creds is None:
                creds = self._credentials()
            answer = self.ask(reference, creds)
            if answer.verdict in (PRESENT, ABSENT):
                ttl = float(self.check.cache_seconds)
            else:
                ttl = min(UNKNOWN_SECONDS, self.check.cache_seconds or UNKNOWN_SECONDS)
            self.cache[reference] = (answer, now + ttl)
            out[reference] = answer
        return out

    def _credentials(self) -> Credentials:
        try:
            return self.credentials()
        except ValueError:
            return {}  # the secret's problem is said by the answer that needed it ("denied")

    def ask(self, reference: str, creds: Credentials) -> RegistryAnswer:
        try:
            image = split_reference(reference)
        except ValueError as exc:
            return RegistryAnswer("unknown", str(exc))
        scheme = "http" if image.host in self.check.plain_http else "https"
        url = f"{scheme}://{image.host}/v2/{image.repository}/manifests/{image.tag}"
        login = creds.get(image.host)
        try:
            status, challenge = self._head(url, {})
            if status == 401 and challenge:
                auth = self._authorization(challenge, image, login)
                if isinstance(auth, RegistryAnswer):
                    return auth
                status, challenge = self._head(url, {"Authorization": auth})
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            cause = failure_cause(exc, self.check.timeout_seconds)
            return RegistryAnswer("unknown", f"registry {image.host} unreachable: {cause}")
        if status == 200:
            return RegistryAnswer(PRESENT, f"HEAD {url}: 200")
        if status == 404:
            return RegistryAnswer(ABSENT, f"HEAD {url}: 404 manifest unknown")
        if status in (401, 403):
            why = "no pull secret for it" if login is None else "its pull secret was refused"
            return RegistryAnswer("unknown", f"registry {image.host} denied HEAD {url} ({status}; {why})")
        return RegistryAnswer("unknown", f"registry {image.host} answered HEAD {url} with HTTP {status}")

    def _head(self, url: str, headers: Mapping[str, str]) -> tuple[int, str]:
        self.asked += 1
        response = self.pool.request("HEAD", url, headers={"Accept": MANIFEST_TYPES, **headers}, redirect=True)
        return response.status, str(response.headers.get("WWW-Authenticate") or "")

    def _authorization(
        self, challenge: str, image: ImageName, login: tuple[str, str] | None
    ) -> str | RegistryAnswer:
        """The Authorization header a challenge asks for, or why it cannot be had."""
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            if login is None:
                return RegistryAnswer("unknown", f"registry {image.host} wants credentials: no pull secret for it")
            return _basic(login)
        if scheme != "bearer":
            return RegistryAnswer("unknown", f"registry {image.host} asks for {scheme} authentication")
        params = dict(_CHALLENGE.findall(challenge))
        realm = params.pop("realm", None)
        if not realm:
            return RegistryAnswer("unknown", f"registry {image.host}: a Bearer challenge without a realm")
        query = {k: v for k, v in params.items() if k == "service"}
        query["scope"] = params.get("scope") or f"repository:{image.repository}:pull"
        headers = {"Authorization": _basic(login)} if login is not None else {}
        response = self.pool.request("GET", f"{realm}?{urlencode(query)}", headers=headers, preload_content=False)
        try:
            body = response.read(TOKEN_MAX_BYTES + 1)
        finally:
            response.release_conn()
        if response.status != 200:
            return RegistryAnswer("unknown", f"token service {realm} answered HTTP {response.status}")
        token = _token(body)
        if token is None:
            return RegistryAnswer("unknown", f"token service {realm} gave no token")
        return f"Bearer {token}"


def _basic(login: tuple[str, str]) -> str:
    return "Basic " + base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()


def _token(body: bytes) -> str | None:
    try:
        data: Any = json.loads(body)
    except ValueError:
        return None
    token = (data.get("token") or data.get("access_token")) if isinstance(data, dict) else None
    return token if isinstance(token, str) and token.isprintable() else None


def docker_credentials(secrets: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """Registry host -> (username, password) from `kubernetes.io/dockerconfigjson` Secrets, as the
    kubelet reads them (`auths.<host>.auth` = base64 of user:password, or username and password)."""
    out: dict[str, tuple[str, str]] = {}
    for secret in secrets:
        raw = (secret.get("data") or {}).get(".dockerconfigjson")
        if not raw:
            continue
        try:
            config = json.loads(base64.b64decode(raw))
        except ValueError:
            raise ValueError(f"secret {_name(secret)}: .dockerconfigjson is not base64 JSON") from None
        for host, entry in (config.get("auths") or {}).items() if isinstance(config, dict) else ():
            if not isinstance(entry, dict):
                continue
            user, password = entry.get("username"), entry.get("password")
            if entry.get("auth"):
                user, _, password = base64.b64decode(entry["auth"]).decode("utf-8", "replace").partition(":")
            if user and password is not None:
                bare = re.sub(r"^https?://", "", str(host)).split("/", 1)[0]
                out.setdefault(bare, (str(user), str(password)))
    return out


def _name(secret: Mapping[str, Any]) -> str:
    meta = secret.get("metadata") or {}
    return flat_line(f"{meta.get('namespace', '?')}/{meta.get('name', '?')}")
