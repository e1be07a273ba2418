"""deploy/ renders with real kubectl, runs hardened, and the Dockerfile builds from project metadata."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    cache = tmp_path_factory.mktemp("kube-cache")
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "deploy")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"HOME": str(cache), "PATH": "/usr/bin:/bin"},
    )
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


@pytest.mark.kubectl
def test_kustomize_renders_everything(rendered: dict[str, dict[str, Any]]) -> None:
    assert set(rendered) >= {
        "Namespace/upgrader-system",
        "ServiceAccount/upgrader",
        "ClusterRole/upgrader",
        "ClusterRoleBinding/upgrader",
        "Role/upgrader",
        "RoleBinding/upgrader",
        "Deployment/upgrader",
        "Service/upgrader-metrics",
        "ServiceMonitor/upgrader",
        "PrometheusRule/upgrader",
        "ConfigMap/upgrader-dashboard",
        "CustomResourceDefinition/driverrollouts.gpu-upgrader.io",
    }
    assert rendered["ConfigMap/upgrader-dashboard"]["metadata"]["labels"]["grafana_dashboard"] == "1"
    # The intent is the DriverRollout object, applied once its CRD is established (deploy/rollout.yaml):
    # a spec change takes effect at the next pass, with no policy ConfigMap to roll the Deployment.
    assert not [k for k in rendered if k.startswith(("ConfigMap/upgrader-policy", "DriverRollout/"))]
    args = rendered["Deployment/upgrader"]["spec"]["template"]["spec"]["containers"][0]["args"]
    rollout = yaml.safe_load((ROOT / "deploy" / "rollout.yaml").read_text())
    assert args[:3] == ["run", "--rollout", rollout["metadata"]["name"]]


@pytest.mark.kubectl
def test_deployment_is_hardened_and_highly_available(rendered: dict[str, dict[str, Any]]) -> None:
    deployment = rendered["Deployment/upgrader"]
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert spec["securityContext"]["runAsNonRoot"] is True
    container = spec["containers"][0]
    assert container["args"][0] == "run"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    env = {e["name"]: e for e in container["env"]}
    assert env["UPGRADER_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


@pytest.mark.kubectl
def test_rbac_has_no_wildcards_and_no_secrets(rendered: dict[str, dict[str, Any]]) -> None:
    for key in ("ClusterRole/upgrader", "Role/upgrader"):
        for rule in rendered[key]["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (key, rule)
            assert "secrets" not in rule["resources"]


def test_dockerfile_is_slim_non_root_and_installs_from_metadata() -> None:
    """Pins, the lock and the build context: tests/ops/test_image.py and test_image_build.py."""
    text = (ROOT / "Dockerfile").read_text()
    froms = [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]
    assert froms and all("slim" in image for image in froms)
    # The project's own wheel is built from its metadata (pyproject.toml, COPYed with the package).
    assert any(line.startswith("RUN pip wheel ") and line.split()[-1] == "." for line in text.splitlines())
    assert "COPY pyproject.toml README.md ./" in text
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["upgrader"]' in text and '"run"' in text
