"""Where the CLI finds its cluster, in controller-runtime's order (--kubeconfig, $KUBECONFIG, the pod's
service account, ~/.kube/config), the one line when none is there, and the CLI as kubectl's plugin."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from upgrader import __version__
from upgrader.commands.cli import main
from upgrader.inputs import ClientConfigError
from upgrader.kube.client import api_client

IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def _kubeconfig(path: Path, server: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    """A kubeconfig for the flag, one for $KUBECONFIG, ~/.kube/config, and a service account's files."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-token")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    return {
        "flag": _kubeconfig(tmp_path / "flag.kubeconfig", "https://flag.example:6443"),
        "env": _kubeconfig(tmp_path / "env.kubeconfig", "https://env.example:6443"),
        "home": str(tmp_path / "home"),
        "account": str(account),
    }


def _host(places: dict[str, str], kubeconfig: str | None = None, context: str | None = None, **env: str) -> str:
    client = api_client(kubeconfig, context, environ={"HOME": places["home"], **env},
                        service_account=Path(places["account"]))
    return str(client.configuration.host)


def test_the_first_one_there_is_used_in_controller_runtimes_order(places: dict[str, str]) -> None:
    _kubeconfig(Path(places["home"]) / ".kube" / "config", "https://home.example:6443")
    everything = {"KUBECONFIG": places["env"], **IN_POD}
    assert _host(places, places["flag"], **everything) == "https://flag.example:6443"
    assert _host(places, **everything) == "https://env.example:6443"
    client = api_client(environ={"HOME": places["home"], **IN_POD}, service_account=Path(places["account"]))
    assert client.configuration.host == "https://10.96.0.1:443"
    assert client.configuration.api_key["BearerToken"] == "bearer sa-token"
    assert client.configuration.ssl_ca_cert == str(Path(places["account"]) / "ca.crt")
    assert _host(places) == "https://home.example:6443"
    assert _host(places, context="c", **IN_POD) == "https://home.example:6443"  # a context is a kubeconfig's


def test_none_there_is_one_line_naming_what_was_tried(places: dict[str, str]) -> None:
    home = Path(places["home"]) / ".kube" / "config"
    with pytest.raises(ClientConfigError) as none:
        _host(places)
    assert str(none.value) == (
        "no cluster configuration: tried --kubeconfig (not given), $KUBECONFIG (not set), the pod's service account "
        f"(not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT not set), {home} (no such file)"
    )
    os.remove(Path(places["account"]) / "token")
    with pytest.raises(ClientConfigError) as no_token:
        _host(places, **IN_POD)
    assert f"the pod's service account ({places['account']}/token does not exist), {home}" in str(no_token.value)
    with pytest.raises(ClientConfigError) as missing:  # set, so nothing after it is tried
        _host(places, KUBECONFIG="/nowhere/config", **IN_POD)
    assert str(missing.value) == (
        "$KUBECONFIG /nowhere/config: no such file (while $KUBECONFIG is set, neither the pod's service "
        "account nor ~/.kube/config is tried)"
    )


def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for name in [*IN_POD, "KUBECONFIG"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["run", "--once"]) == 2
    assert capsys.readouterr() == ("", (
        "upgrader: error: no cluster configuration: tried --kubeconfig (not given), $KUBECONFIG (not set), "
        "the pod's service account (not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT not set), "
        f"{tmp_path}/.kube/config (no such file)\n"))


@pytest.mark.kubectl
def test_kubectl_finds_the_plugin_and_runs_the_same_cli(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (not on PATH)")
    bin_dir = Path(sys.executable).parent
    plugin = bin_dir / "kubectl-upgrader"
    assert plugin.is_file(), f"{plugin} missing: install the package again (pip install -e .) for its entry points"
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    listed = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True, env=env, timeout=30)
    assert listed.returncode == 0, listed.stderr
    assert str(plugin) in listed.stdout.splitlines(), listed.stdout
    version = subprocess.run([kubectl, "upgrader", "--version"], capture_output=True, text=True, env=env, timeout=30)
    assert (version.returncode, version.stdout, version.stderr) == (0, f"upgrader {__version__}\n", "")
    usage = subprocess.run([kubectl, "upgrader", "status", "--help"], capture_output=True, text=True, env=env,
                           timeout=30)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: kubectl upgrader status "), usage.stdout
    # `status` itself, looking for its cluster where kubectl's own environment says (nowhere here).
    status = subprocess.run([kubectl, "upgrader", "status"], capture_output=True, text=True, env=env, timeout=60)
    assert (status.returncode, status.stdout) == (2, "")
    assert status.stderr.startswith("upgrader: error: no cluster configuration: tried --kubeconfig (not given), ")
    assert status.stderr.endswith(f"{tmp_path}/.kube/config (no such file)\n") and status.stderr.count("\n") == 1
