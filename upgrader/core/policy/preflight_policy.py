"""The policy's `preflight` section: what `run` judges a start by, beside `plan`'s flags of the same
names (docs/policy.md#preflight). Each input is a file (read once, at start: a bad one is exit 2) or
a ConfigMap (read every pass: one that is gone or unreadable holds the nodes it would judge)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from upgrader.core.compat.cuda import parse_floors

_OBJECT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_HOST = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def _object_name(value: str) -> str:
    """`namespace/name`, both as Kubernetes spells them."""
    if not _OBJECT.match(value):
        raise ValueError(f"must be namespace/name (lower-case letters, digits, '-', '.'), got {value!r}")
    return value


class InputSource(_Section):
    """Exactly one of `file` and `configMap` (`namespace/name`); `key`: the ConfigMap's data key."""

    file: str | None = None
    config_map: str | None = Field(None, alias="configMap")
    key: str | None = None

    @field_validator("config_map")
    @classmethod
    def _config_map(cls, value: str | None) -> str | None:
        return None if value is None else _object_name(value)

    @model_validator(mode="after")
    def _one(self) -> InputSource:
        if (self.file is None) == (self.config_map is None):
            raise ValueError("give exactly one of file and configMap")
        if self.key is not None and self.config_map is None:
            raise ValueError("key names a ConfigMap's data key: it needs configMap")
        return self

    def where(self, default_key: str) -> str:
        if self.file is not None:
            return f"file {self.file}"
        return f"configmap {self.config_map} key {self.key or default_key}"


class RegistryCheck(_Section):
    """Ask the registry for each precompiled tag's manifest (an OCI distribution HEAD)."""

    cache_seconds: int = Field(300, alias="cacheSeconds", ge=0, le=86400, strict=True)
    timeout_seconds: int = Field(5, alias="timeoutSeconds", ge=1, le=60, strict=True)
    # kubernetes.io/dockerconfigjson Secrets (namespace/name) with the credentials, as pods pull with
    pull_secrets: tuple[str, ...] = Field((), alias="pullSecrets")
    # registries (host[:port]) spoken to over plain HTTP: a registry on loopback, never a public one
    plain_http: tuple[str, ...] = Field((), alias="plainHttp")

    @field_validator("pull_secrets")
    @classmethod
    def _secrets(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_object_name(v) for v in value)

    @field_validator("plain_http")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for host in value:
            if not _HOST.match(host):
                raise ValueError(f"not a registry host[:port]: {host!r}")
        return value


class PreflightPolicy(_Section):
    image_ledger: InputSource | None = Field(None, alias="imageLedger")
    profiles: InputSource | None = None
    cuda_floors: tuple[str, ...] = Field((), alias="cudaFloors")  # as plan's --floor: MAJOR=VERSION
    registry: RegistryCheck | None = None

    @field_validator("cuda_floors", mode="before")
    @classmethod
    def _floors(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            parse_floors([str(v) for v in value])  # ValueError names the item
        return value

    @field_validator("registry", mode="before")
    @classmethod
    def _null_registry(cls, value: Any) -> Any:
        """`registry:` with nothing under it turns the check on with its defaults."""
        return {} if value is None else value
