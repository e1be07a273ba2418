"""Controller settings (environment variables `UPGRADER_*`) and policy files.

Bad input is a `ConfigError` whose message is one line naming what is wrong; the CLI prints it
and exits 2.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from upgrader.core.input_errors import one_line, printable, yaml_where
from upgrader.core.policy import Policy, policy_from_mapping
from upgrader.core.selectors import SelectorError, parse_label_selector


class ConfigError(Exception):
    """Unusable input (policy file, settings, flags); the message is the one line a user sees."""


class ClientConfigError(ConfigError):
    """The kubeconfig or in-cluster configuration cannot be used; the message says why."""


def _identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


# Kubernetes object names: namespaces are DNS-1123 labels, ConfigMaps and Leases DNS-1123 subdomains.
# Checked here, so a bad name is refused before it becomes a request path (`-n a/b` would PATCH
# `/api/v1/namespaces/a/b/...`).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError("not a namespace name (lower-case letters, digits and '-', at most 63 characters)")
    return value


def _dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError("not an object name (lower-case letters, digits, '-' and '.', at most 253 characters)")
    return value


NamespaceName = Annotated[str, AfterValidator(_dns_label)]
ObjectName = Annotated[str, AfterValidator(_dns_subdomain)]


class Settings(BaseSettings):
    """Where upgrader finds the driver and keeps its own objects; every field is `UPGRADER_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="UPGRADER_", extra="ignore")

    namespace: NamespaceName = "gpu-operator"  # status ConfigMap, Lease and Events live here
    driver_namespace: NamespaceName = "gpu-operator"
    driver_daemonset_selector: str = "app.kubernetes.io/component=nvidia-driver"
    driver_pod_selector: str = "app=nvidia-driver-daemonset"
    status_configmap: ObjectName = "gpu-driver-upgrade-status"
    lease_name: ObjectName = "gpu-driver-upgrader"
    lease_duration_seconds: float = Field(15.0, gt=0, allow_inf_nan=False)
    requeue_seconds: float = Field(5.0, gt=0, allow_inf_nan=False)
    # Watch events closer together than this are handled by one pass: node status updates from
    # thousands of kubelets would otherwise run passes back to back.
    min_pass_interval_seconds: float = Field(1.0, ge=0, allow_inf_nan=False)
    identity: str = Field(default_factory=_identity, min_length=1)
    event_namespace: NamespaceName = "default"  # node Events go here, as kubelet's do
    metrics_port: int = Field(0, ge=0, le=65535)  # /metrics, /healthz, /readyz; 0 = not served

    @field_validator("driver_daemonset_selector", "driver_pod_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        try:
            parse_label_selector(value)
        except SelectorError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("identity")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if not value.isprintable():  # it goes into the User-Agent header and the Lease
            raise ValueError("must be printable text on one line")
        return value


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment; `overrides` come from command-line flags of the same name."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        # Name what the user set: the flag (`--namespace`) or the variable (`UPGRADER_NAMESPACE`).
        source = f"--{name.replace('_', '-')}" if name in given else f"UPGRADER_{name.upper()}"
        message = printable(str(first["msg"]).removeprefix("Value error, "))
        extra = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise ConfigError(f"settings: {source}={printable(repr(first['input']))}: {message}{extra}") from None


def load_policy(path: str | None) -> Policy:
    """The policy in a YAML file (the defaults when no file is given)."""
    if path is None:
        return Policy()
    file = Path(path)
    if file.is_dir():
        raise ConfigError(f"policy {path}: is a directory, expected a YAML file")
    if not file.is_file():
        raise ConfigError(f"policy {path}: no such file")
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"policy {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"policy {path}: not UTF-8 text, so not a YAML policy") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = yaml_where(exc)
        raise ConfigError(f"policy {path}: not valid YAML{where}") from None
    try:
        return policy_from_mapping(data)
    except ValidationError as exc:
        raise ConfigError(one_line(exc, f"policy {path}")) from None
    except ValueError as exc:
        raise ConfigError(f"policy {path}: {exc}") from None
