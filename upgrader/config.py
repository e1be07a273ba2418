"""Controller settings (environment variables `UPGRADER_*`) and policy files.

Bad input is a `ConfigError` whose message is one line naming what is wrong; the CLI prints it
and exits 2.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from upgrader.core.policy import Policy, policy_from_mapping


class ConfigError(Exception):
    """Unusable input (policy file, settings, flags); the message is the one line a user sees."""


class ClientConfigError(ConfigError):
    """The kubeconfig or in-cluster configuration cannot be used; the message says why."""


def _identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Settings(BaseSettings):
    """Where upgrader finds the driver and keeps its own objects; every field is `UPGRADER_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="UPGRADER_", extra="ignore")

    namespace: str = Field("gpu-operator", min_length=1)  # status ConfigMap, Lease and Events live here
    driver_namespace: str = Field("gpu-operator", min_length=1)
    driver_daemonset_selector: str = "app.kubernetes.io/component=nvidia-driver"
    driver_pod_selector: str = "app=nvidia-driver-daemonset"
    status_configmap: str = "gpu-driver-upgrade-status"
    lease_name: str = "gpu-driver-upgrader"
    lease_duration_seconds: float = Field(15.0, gt=0)
    requeue_seconds: float = Field(5.0, gt=0)
    identity: str = Field(default_factory=_identity)
    event_namespace: str = "default"  # node Events go here, as kubelet's do
    metrics_port: int = Field(0, ge=0, le=65535)  # /metrics, /healthz, /readyz; 0 = not served


def _printable(text: str) -> str:
    """Text from the input (a key) as it can sit on one line: quoted when it holds a line break."""
    return text if text.isprintable() else repr(text)


def one_line(error: ValidationError, what: str) -> str:
    first = error.errors()[0]
    where = ".".join(_printable(str(p)) for p in first["loc"]) or "(top level)"
    message = _printable(str(first["msg"]).removeprefix("Value error, "))
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    extra = f" (and {error.error_count() - 1} more problems)" if error.error_count() > 1 else ""
    return f"{what}: {where}: {message}{extra}"


def load_settings(**overrides: Any) -> Settings:
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise ConfigError(one_line(exc, "settings")) from None


def load_policy(path: str | None) -> Policy:
    """The policy in a YAML file (the defaults when no file is given)."""
    if path is None:
        return Policy()
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"policy {path}: no such file")
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"policy {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"policy {path}: not valid YAML") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"policy {path}: not valid YAML{where}") from None
    try:
        return policy_from_mapping(data)
    except ValidationError as exc:
        raise ConfigError(one_line(exc, f"policy {path}")) from None
    except ValueError as exc:
        raise ConfigError(f"policy {path}: {exc}") from None
