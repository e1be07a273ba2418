"""Controller settings (environment variables `UPGRADER_*`) and policy files.

Bad input is a `ConfigError` (upgrader/inputs.py) whose message is one line naming what is wrong; the CLI prints it
and exits 2.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from upgrader.core.model.input_errors import one_line, printable
from upgrader.core.policy.policy import Policy, policy_from_mapping, selector_problem
from upgrader.inputs import FROM_FILE_MAX_MIB, POLICY_MAX_BYTES, ConfigError, load_yaml, read_bounded


def _identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


# Kubernetes object names: namespaces are DNS-1123 labels, ConfigMaps and Leases DNS-1123 subdomains.
# Checked here, so a bad name is refused before it becomes a request path (`-n a/b` would PATCH
# `/api/v1/namespaces/a/b/...`).
# fullmatch, not `$`: `$` also matches before a trailing newline.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ValueError("not a namespace name (lower-case letters, digits and '-', at most 63 characters)")
    return value


def _dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError("not an object name (lower-case letters, digits, '-' and '.', at most 253 characters)")
    return value


NamespaceName = Annotated[str, AfterValidator(_dns_label)]
ObjectName = Annotated[str, AfterValidator(_dns_subdomain)]


# Where a controller keeps its status ConfigMap and Lease: `upgrader-system` as deploy/ installs it,
# `gpu-operator` (Settings' default) for `upgrader run` without UPGRADER_NAMESPACE and the emulator.
# `status`, `pause`, `resume` and `acknowledge` without -n or UPGRADER_NAMESPACE look in both
# (upgrader/commands/status.py).
CONTROLLER_NAMESPACES = ("upgrader-system", "gpu-operator")


class Settings(BaseSettings):
    """Where upgrader finds the driver and keeps its own objects; every field is `UPGRADER_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="UPGRADER_", extra="ignore")

    # Status ConfigMap and Lease. The default serves `upgrader run` and the emulator; deploy/ sets
    # UPGRADER_NAMESPACE to its own namespace (upgrader-system). See CONTROLLER_NAMESPACES.
    namespace: NamespaceName = "gpu-operator"
    driver_namespace: NamespaceName = "gpu-operator"
    driver_daemonset_selector: str = "app.kubernetes.io/component=nvidia-driver"
    driver_pod_selector: str = "app=nvidia-driver-daemonset"
    status_configmap: ObjectName = "gpu-driver-upgrade-status"
    # The operators' intent (pause, acknowledged failures): written by `upgrader pause`, `resume` and
    # `acknowledge` (or kubectl), only ever read by the controller, so losing the status loses no intent.
    control_configmap: ObjectName = "gpu-driver-upgrade-control"
    lease_name: ObjectName = "gpu-driver-upgrader"
    # `run --rollout`: the DriverRollout object (deploy/crd.yaml) that holds the intent; None: --policy.
    rollout: ObjectName | None = None
    lease_duration_seconds: float = Field(15.0, gt=0, allow_inf_nan=False)
    requeue_seconds: float = Field(5.0, gt=0, allow_inf_nan=False)
    # Watch events closer together than this are handled by one pass: node status updates from
    # thousands of kubelets would otherwise run passes back to back.
    min_pass_interval_seconds: float = Field(1.0, ge=0, allow_inf_nan=False)
    identity: str = Field(default_factory=_identity, min_length=1)
    event_namespace: NamespaceName = "default"  # node Events go here, as kubelet's do
    metrics_port: int = Field(0, ge=0, le=65535)  # /metrics, /healthz, /readyz; 0 = not served
    # `plan --from-file` refuses bigger files (MiB): reading one takes about 7x its size in memory.
    from_file_max_mib: int = Field(FROM_FILE_MAX_MIB, ge=1)

    @field_validator("driver_daemonset_selector", "driver_pod_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        problem = selector_problem(value)
        if problem is not None:
            raise ValueError(problem)
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
    raw = read_bounded(file, f"policy {path}", POLICY_MAX_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"policy {path}: not UTF-8 text, so not a YAML policy") from None
    data = load_yaml(text, f"policy {path}")
    try:
        return policy_from_mapping(data)
    except ValidationError as exc:
        raise ConfigError(one_line(exc, f"policy {path}")) from None
    except ValueError as exc:
        raise ConfigError(f"policy {path}: {exc}") from None
