"""Build an authenticated ApiClient from a kubeconfig (optionally a context) or in-cluster config.

urllib3 retries nothing: KubeApi retries in one place (tenacity, with backoff), and urllib3's own
retries would multiply its tries and log a `Retrying (Retry(total=2, ...))` warning for each.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from upgrader.core.input_errors import printable
from upgrader.inputs import KUBECONFIG_MAX_BYTES, ClientConfigError, ConfigError, load_yaml, read_bounded

__all__ = ["ClientConfigError", "api_client"]


def _check_kubeconfig(path: str, context: str | None) -> None:
    """Refuse, in one line naming the file, a kubeconfig the Kubernetes client would choke on."""
    file = Path(path)
    if file.is_dir():
        raise ClientConfigError(f"kubeconfig {path}: is a directory, expected a kubeconfig file")
    if not file.is_file():
        raise ClientConfigError(f"kubeconfig {path} does not exist")
    what = f"kubeconfig {path}"
    try:
        text = read_bounded(file, what, KUBECONFIG_MAX_BYTES).decode("utf-8")
        data = load_yaml(text, what)  # bounded first: the client's own parser recurses per level
    except UnicodeDecodeError:
        raise ClientConfigError(f"{what}: not UTF-8 text, so not a kubeconfig") from None
    except ConfigError as exc:
        raise ClientConfigError(str(exc)) from None
    if data is None:
        raise ClientConfigError(f"kubeconfig {path}: the file is empty")
    if not isinstance(data, dict):
        raise ClientConfigError(
            f"kubeconfig {path}: not a kubeconfig ({type(data).__name__}, expected a mapping with "
            "clusters, users and contexts)"
        )
    for key in ("clusters", "users", "contexts"):
        if data.get(key) is not None and not isinstance(data[key], list):
            raise ClientConfigError(f"kubeconfig {path}: {key} is {type(data[key]).__name__}, expected a list")
    if context is not None:
        names = [str(c.get("name")) for c in data.get("contexts") or [] if isinstance(c, dict)]
        if context not in names:
            known = ", ".join(printable(name) for name in names) or "none"
            raise ClientConfigError(
                f"--context {printable(context)}: no such context in kubeconfig {path} (it has: {known})"
            )


def api_client(kubeconfig: str | None = None, context: str | None = None) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    what = f"kubeconfig {kubeconfig}: " if kubeconfig else ""
    try:
        if kubeconfig:
            _check_kubeconfig(kubeconfig, context)
            k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
        elif context:
            k8s_config.load_kube_config(context=context, client_configuration=configuration)
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except ConfigException:
                k8s_config.load_kube_config(client_configuration=configuration)
    except ConfigException as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid kubeconfig"
        raise ClientConfigError(f"{what}{first}") from None
    except yaml.YAMLError:
        raise ClientConfigError(f"{what or 'kubeconfig: '}not valid YAML") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # the client's parser met odd shapes
        raise ClientConfigError(f"{what}invalid kubeconfig: {type(exc).__name__}: {printable(str(exc))}") from None
    configuration.retries = False  # read when the ApiClient builds its connection pools
    return k8s.ApiClient(configuration)
