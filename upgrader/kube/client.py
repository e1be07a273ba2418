"""Build an authenticated ApiClient from a kubeconfig (optionally a context) or in-cluster config."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from upgrader.config import ClientConfigError

__all__ = ["ClientConfigError", "api_client"]


def api_client(kubeconfig: str | None = None, context: str | None = None) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    try:
        if kubeconfig:
            if not Path(kubeconfig).is_file():
                raise ClientConfigError(f"kubeconfig {kubeconfig} does not exist")
            k8s_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        elif context:
            k8s_config.load_kube_config(context=context, client_configuration=configuration)
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)
            except ConfigException:
                k8s_config.load_kube_config(client_configuration=configuration)
    except ConfigException as exc:
        raise ClientConfigError(str(exc).splitlines()[0] if str(exc) else "invalid kubeconfig") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ClientConfigError(f"invalid kubeconfig: {exc}") from None
    return k8s.ApiClient(configuration)
