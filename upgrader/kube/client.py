"""Build an authenticated ApiClient from a kubeconfig (optionally a context) or in-cluster config."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from upgrader.config import ClientConfigError

__all__ = ["ClientConfigError", "api_client"]


def _line(text: str) -> str:
    """Text from a flag or the file as it can sit on one line: quoted when it holds a line break."""
    return text if text.isprintable() else repr(text)


def _check_kubeconfig(path: str, context: str | None) -> None:
    """Refuse, in one line naming the file, a kubeconfig the Kubernetes client would choke on."""
    file = Path(path)
    if file.is_dir():
        raise ClientConfigError(f"kubeconfig {path}: is a directory, expected a kubeconfig file")
    if not file.is_file():
        raise ClientConfigError(f"kubeconfig {path} does not exist")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClientConfigError(f"kubeconfig {path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ClientConfigError(f"kubeconfig {path}: not UTF-8 text, so not a kubeconfig") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ClientConfigError(f"kubeconfig {path}: not valid YAML{where}") from None
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
            known = ", ".join(_line(name) for name in names) or "none"
            raise ClientConfigError(
                f"--context {_line(context)}: no such context in kubeconfig {path} (it has: {known})"
            )


def api_client(kubeconfig: str | None = None, context: str | None = None) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    what = f"kubeconfig {kubeconfig}: " if kubeconfig else ""
    try:
        if kubeconfig:
            _check_kubeconfig(kubeconfig, context)
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
        first = str(exc).splitlines()[0] if str(exc) else "invalid kubeconfig"
        raise ClientConfigError(f"{what}{first}") from None
    except yaml.YAMLError:
        raise ClientConfigError(f"{what or 'kubeconfig: '}not valid YAML") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # the client's parser met odd shapes
        raise ClientConfigError(f"{what}invalid kubeconfig: {type(exc).__name__}: {_line(str(exc))}") from None
    return k8s.ApiClient(configuration)
