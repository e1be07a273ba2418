"""A real OCI registry on loopback for the registry-check tests: Debian's `docker-registry` (the CNCF
distribution registry), images pushed by `skopeo`, and optionally the registry's token auth with a
token service of the test's own, as public registries (nvcr.io, Docker Hub) run it.

On a laptop without them these tests skip, saying how to install them; CI (`.ci/run` installs both
and sets UPGRADER_REQUIRE_REGISTRY=1) fails instead of skipping.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import subprocess
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.conftest import free_port, required_binary

INSTALL = "install them with `sudo apt-get install docker-registry skopeo openssl` (Debian/Ubuntu)"
SERVICE = "upgrader-test-registry"
ISSUER = "upgrader-test-token-service"


def binary(name: str) -> str:
    return required_binary(name, INSTALL, "UPGRADER_REQUIRE_REGISTRY")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def oci_layout(directory: Path) -> Path:
    """A one-layer OCI image layout, tagged `latest`, for skopeo to push."""
    blobs = directory / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> tuple[str, int]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return f"sha256:{digest}", len(data)

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("README")
        info.size = len(b"driver")
        tar.addfile(info, io.BytesIO(b"driver"))
    layer, layer_size = blob(gzip.compress(raw.getvalue(), mtime=0))
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    config_digest, config_size = blob(json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size
        },
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": layer_size}],
    }
    manifest_digest, manifest_size = blob(json.dumps(manifest).encode())
    (directory / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    entry = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": manifest_digest,
        "size": manifest_size,
        "annotations": {"org.opencontainers.image.ref.name": "latest"},
    }
    (directory / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
    return directory


@dataclass
class TokenService:
    """The registry's token service: signs RS256 JWTs (openssl) granting pull on public repositories
    to anyone, and on the others to `users` (HTTP Basic on the token request)."""

    directory: Path
    public: tuple[str, ...]
    users: dict[str, str] = field(default_factory=dict)
    port: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.key, self.cert = self.directory / "token.key", self.directory / "token.pem"
        subprocess.run(
            [binary("openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.key), "-out",
             str(self.cert), "-days", "2", "-subj", "/CN=upgrader-test-token-service"],
            check=True, capture_output=True, timeout=60,
        )
        der = subprocess.run(
            ["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], check=True, capture_output=True, timeout=30
        ).stdout
        self.x5c = base64.b64encode(der).decode()

    def token(self, scope: str, user: str | None) -> str:
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        allowed = kind == "repository" and "pull" in actions.split(",") and (name in self.public or user is not None)
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {
            "iss": ISSUER, "sub": user or "", "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
            "jti": f"{now}-{len(self.requests)}",
            "access": [{"type": "repository", "name": name, "actions": ["pull"]}] if allowed else [],
        }
        signing = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signing.encode(), check=True,
            capture_output=True, timeout=30,
        ).stdout
        return f"{signing}.{_b64url(signature)}"

    def serve(self) -> Iterator[str]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                query = {k: v[-1] for k, v in parse_qs(urlparse(self.path).query).items()}
                user = None
                auth = self.headers.get("Authorization") or ""
                if auth.startswith("Basic "):
                    name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                    if service.users.get(name) != password:
                        self.send_response(401)
                        self.end_headers()
                        return
                    user = name
                service.requests.append({"query": query, "user": user})
                body = json.dumps({"token": service.token(query.get("scope", ""), user)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{self.port}/token"
        finally:
            server.shutdown()
            server.server_close()


@dataclass
class RealRegistry:
    """`docker-registry serve` on loopback over plain HTTP; `push` copies a tiny image to repo:tag."""

    directory: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, realm: str | None = None, cert: Path | None = None) -> None:
        self.stop()
        self.port = self.port or free_port()
        auth = ""
        if realm is not None:
            auth = (f"auth:\n  token:\n    realm: {realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n"
                    f"    rootcertbundle: {cert}\n")
        config = self.directory / "config.yml"
        storage = f"storage:\n  filesystem: {{rootdirectory: {self.directory / 'data'}}}\n  delete: {{enabled: true}}\n"
        config.write_text(f"version: 0.1\nlog: {{level: error}}\n{storage}http:\n  addr: {self.host}\n{auth}")
        log = (self.directory / "registry.log").open("ab")
        self.process = subprocess.Popen([binary("docker-registry"), "serve", str(config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1)
                return
            except urllib.error.HTTPError:
                return  # 401 under token auth: it is up
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"docker-registry did not come up: {(self.directory / 'registry.log').read_text()}")

    def push(self, repository: str, tag: str) -> None:
        layout = self.directory / "layout"
        if not layout.exists():
            oci_layout(layout)
        subprocess.run(
            [binary("skopeo"), "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:latest",
             f"docker://{self.host}/{repository}:{tag}"],
            check=True, capture_output=True, timeout=120,
        )

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None
