"""Build an authenticated ApiClient from a kubeconfig (optionally a context) or in-cluster config.

Where from, in controller-runtime's order: --kubeconfig; $KUBECONFIG; in a pod, its service account;
~/.kube/config (`api_client`).

urllib3 retries nothing: KubeApi retries in one place (tenacity, with backoff), and urllib3's own
retries would multiply its tries and log a `Retrying (Retry(total=2, ...))` warning for each.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import SERVICE_HOST_ENV_NAME, SERVICE_PORT_ENV_NAME, InClusterConfigLoader

from upgrader.core.model.input_errors import printable
from upgrader.inputs import KUBECONFIG_MAX_BYTES, ClientConfigError, ConfigError, load_yaml, read_bounded

__all__ = ["ClientConfigError", "api_client"]

# In a pod: the service account's token and CA here, and the API server's Service in the environment
# (KUBERNETES_SERVICE_HOST/PORT, which the kubelet sets in every pod).
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def _check_kubeconfig(path: str, context: str | None) -> list[str]:
    """Refuse, in one line naming the file, a kubeconfig the Kubernetes client would choke on; its
    context names."""
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
    names = [str(c.get("name")) for c in data.get("contexts") or [] if isinstance(c, dict)]
    if context is not None:
        _check_context(context, names, f"kubeconfig {path}")
    return names


def _check_context(context: str, names: list[str], where: str) -> None:
    if context not in names:
        known = ", ".join(printable(name) for name in names) or "none"
        raise ClientConfigError(f"--context {printable(context)}: no such context in {where} (it has: {known})")


def api_client(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    service_account: Path | None = None,
) -> k8s.ApiClient:
    """The client for the first of these that is there, in controller-runtime's order: the file
    `kubeconfig` (--kubeconfig); the files $KUBECONFIG names (':'-separated, merged); in a pod, its
    service account (KUBERNETES_SERVICE_HOST/PORT set, the token and CA in `service_account`);
    ~/.kube/config. With `context` and no `kubeconfig`, never the service account: a context is a
    kubeconfig's.

    The first one there is the one used: a broken kubeconfig is refused (ClientConfigError), not
    passed over for the next. None there: a ClientConfigError naming each one tried and why not.
    `environ` and `service_account`: os.environ and SERVICE_ACCOUNT, unless a test gives others.
    """
    env = os.environ if environ is None else environ
    configuration = k8s.Configuration()
    if kubeconfig:
        _load(kubeconfig, context, configuration)
    elif env.get("KUBECONFIG"):
        _load_env(env["KUBECONFIG"], context, configuration)
    else:
        tried = ["--kubeconfig (not given)", "$KUBECONFIG (not set)"]
        in_cluster = "not with --context" if context else _in_cluster(env, service_account, configuration)
        home = _home(env)
        if in_cluster is not None and home.is_file():
            _load(str(home), context, configuration)
        elif in_cluster is not None:
            tried += [f"the pod's service account ({in_cluster})", f"{home} (no such file)"]
            raise ClientConfigError(f"no cluster configuration: tried {', '.join(tried)}")
    configuration.retries = False  # read when the ApiClient builds its connection pools
    return k8s.ApiClient(configuration)


def _home(env: Mapping[str, str]) -> Path:
    """~/.kube/config: under $HOME, else the user's home directory (as controller-runtime finds it)."""
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".kube" / "config"


def _in_cluster(env: Mapping[str, str], directory: Path | None, configuration: k8s.Configuration) -> str | None:
    """Configure from the pod's service account: None when done, else why not (one phrase)."""
    if not env.get(SERVICE_HOST_ENV_NAME) or not env.get(SERVICE_PORT_ENV_NAME):
        return f"not in a pod: {SERVICE_HOST_ENV_NAME} and {SERVICE_PORT_ENV_NAME} not set"
    folder = directory if directory is not None else SERVICE_ACCOUNT
    token, ca = folder / "token", folder / "ca.crt"
    for file in (token, ca):
        if not file.is_file():
            return f"{file} does not exist"
    loader = InClusterConfigLoader(token_filename=str(token), cert_filename=str(ca), environ=env)
    try:
        loader.load_and_set(configuration)
    except ConfigException as exc:  # an empty token or CA file
        return printable(str(exc).splitlines()[0].rstrip(".")) if str(exc) else "unusable"
    except OSError as exc:
        return f"{exc.filename}: {exc.strerror}"
    return None


def _load_env(value: str, context: str | None, configuration: k8s.Configuration) -> None:
    """$KUBECONFIG: the files it names that exist, merged as kubectl merges them."""
    named = [p for p in value.split(os.pathsep) if p]
    there = [p for p in named if os.path.exists(os.path.expanduser(p))]
    if not there:
        missing = "no such file" if len(named) == 1 else "none of these files exists"
        raise ClientConfigError(
            f"$KUBECONFIG {printable(value)}: {missing} (while $KUBECONFIG is set, neither the pod's "
            "service account nor ~/.kube/config is tried)"
        )
    if len(there) == 1:
        _load(os.path.expanduser(there[0]), context, configuration)
        return
    names = [name for path in there for name in _check_kubeconfig(os.path.expanduser(path), None)]
    if context is not None:
        _check_context(context, names, f"$KUBECONFIG {printable(value)}")
    _load(value, context, configuration, checked=True)


def _load(path: str, context: str | None, configuration: k8s.Configuration, checked: bool = False) -> None:
    """One kubeconfig file (or, `checked`, a $KUBECONFIG list whose files were checked)."""
    what = f"$KUBECONFIG {printable(path)}: " if checked else f"kubeconfig {path}: "
    try:
        if not checked:
            _check_kubeconfig(path, context)
        k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    except ConfigException as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid kubeconfig"
        raise ClientConfigError(f"{what}{first}") from None
    except yaml.YAMLError:
        raise ClientConfigError(f"{what}not valid YAML") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # the client's parser met odd shapes
        raise ClientConfigError(f"{what}invalid kubeconfig: {type(exc).__name__}: {printable(str(exc))}") from None
