"""The OpenAPI v3 documents the emulator publishes, judged by the real kubectl: `apply -k deploy/`
(validation and client-side apply read them), `explain` of our CRD and of a built-in kind, and the
served schemas being Kubernetes 1.32's own (kubernetes-validate's definitions)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from upgrader.sim.apiserver import openapi
from upgrader.sim.cluster import EmulatedCluster

ROOT = Path(__file__).resolve().parent.parent.parent
Obj = dict[str, Any]
# The Prometheus Operator's two kinds deploy/ holds, as minimal CRDs (their real schemas are large).
MONITORING_CRDS = "\n---\n".join(
    f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.monitoring.coreos.com}}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, singular: {kind.lower()}}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""
    for kind, plural in (("PrometheusRule", "prometheusrules"), ("ServiceMonitor", "servicemonitors"))
)


class Kubectl:
    def __init__(self, binary: str, kubeconfig: Path, cache: Path) -> None:
        self.base = [binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache)]
        self.env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """stdout, after checking kubectl exited 0 and said nothing on stderr."""
        argv = [*self.base, *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30, env=self.env)
        assert done.returncode == 0 and done.stderr == "", (args, done.stdout, done.stderr)
        return done.stdout


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmulatedCluster]:
    served = EmulatedCluster()
    served.serve()
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def url(cluster: EmulatedCluster) -> str:
    assert cluster.server is not None
    return cluster.server.url


@pytest.fixture(scope="module")
def kubectl(cluster: EmulatedCluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl not installed (not on PATH)")
    tmp = tmp_path_factory.mktemp("openapi")
    return Kubectl(binary, cluster.write_kubeconfig(tmp / "kubeconfig"), tmp / "cache")


@pytest.fixture(scope="module")
def applied(kubectl: Kubectl) -> str:
    """`kubectl apply -k deploy/`'s output, once the monitoring CRDs are there."""
    kubectl.ok("apply", "-f", "-", stdin=MONITORING_CRDS)
    return kubectl.ok("apply", "-k", str(ROOT / "deploy"))


def _get(url: str) -> Obj:
    with urllib.request.urlopen(url, timeout=10) as answer:
        document: Obj = json.load(answer)
    return document


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.kubectl
def test_kubectl_applies_deploy_and_then_patches_a_builtin_by_strategic_merge(
    cluster: EmulatedCluster, kubectl: Kubectl, applied: str
) -> None:
    created = [line for line in applied.splitlines() if line.endswith(" created")]
    assert {
        "deployment.apps/upgrader created",
        "prometheusrule.monitoring.coreos.com/upgrader created",
        "servicemonitor.monitoring.coreos.com/upgrader created",
    } <= set(created), applied
    rendered = [d for d in yaml.safe_load_all(kubectl.ok("kustomize", str(ROOT / "deploy"))) if d]
    deployment = next(d for d in rendered if d["kind"] == "Deployment")
    deployment["spec"]["replicas"] += 1
    first = len(cluster.dispatcher.log)
    assert kubectl.ok("apply", "-f", "-", stdin=json.dumps(deployment)) == "deployment.apps/upgrader configured\n"
    asked = [(r.method, r.path) for r in cluster.dispatcher.log.records()[first:]]
    # The patch came from the v3 document: kubectl asks /openapi/v2 when v3 offers no strategic merge.
    assert ("PATCH", "/apis/apps/v1/namespaces/upgrader-system/deployments/upgrader") in asked
    assert not [path for _, path in asked if path.startswith("/openapi/v2")], asked
    got = kubectl.ok("get", "deployment", "upgrader", "-n", "upgrader-system", "-o", "jsonpath={.spec.replicas}")
    assert got == str(deployment["spec"]["replicas"])


@pytest.mark.kubectl
def test_kubectl_explains_every_field_of_the_crd_spec(kubectl: Kubectl, applied: str) -> None:
    crd = yaml.safe_load((ROOT / "deploy" / "crd.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    out = kubectl.ok("explain", "driverrollout.spec")
    assert out.startswith("GROUP:      gpu-upgrader.io\nKIND:       DriverRollout\nVERSION:    v1alpha1\n"), out
    assert _words(spec["description"]) in _words(out)
    fields = {line.split("\t")[0].strip() for line in out.split("FIELDS:", 1)[1].splitlines() if "\t<" in line}
    assert fields == set(spec["properties"])
    assert "metadata\t<ObjectMeta>" in kubectl.ok("explain", "driverrollout")


@pytest.mark.kubectl
def test_kubectl_explains_a_builtin_in_kubernetes_words(kubectl: Kubectl) -> None:
    out = kubectl.ok("explain", "deployment.spec.strategy")
    described = openapi.definitions().schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"]
    assert _words(described["description"]) in _words(out)
    assert "rollingUpdate\t<RollingUpdateDeployment>" in out and "type\t<string>" in out
    assert "maxSurge <IntOrString>" in kubectl.ok("explain", "deployment.spec.strategy.rollingUpdate.maxSurge")


def test_served_schemas_are_kubernetes_own(url: str) -> None:
    root = _get(f"{url}/openapi/v3")
    apps = _get(url + root["paths"]["apis/apps/v1"]["serverRelativeURL"])
    schemas = apps["components"]["schemas"]
    source = json.loads(openapi.source_path().read_text())["$defs"]
    for name in ("io.k8s.api.apps.v1.DeploymentSpec", "io.k8s.api.apps.v1.DaemonSetStatus"):
        assert set(schemas[name]["properties"]) == set(source[name]["properties"])
        assert schemas[name]["description"] == source[name]["description"]
    assert schemas["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "kind": "Deployment", "version": "v1"}
    ]
    replicas = schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["replicas"]
    assert replicas["type"] == "integer" and replicas["format"] == "int32"
    assert schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["x-kubernetes-int-or-string"] is True
    text = json.dumps(apps)
    refs = {part.split('"', 1)[0] for part in text.split('"$ref": "#/components/schemas/')[1:]}
    assert refs <= set(schemas), refs - set(schemas)  # every reference resolves within the document
    assert '"null"' not in text and "#/$defs/" not in text


@pytest.mark.kubectl
def test_root_hashes_change_with_a_crd_only_for_its_group_version(url: str, kubectl: Kubectl, applied: str) -> None:
    before = _get(f"{url}/openapi/v3")["paths"]
    crd = yaml.safe_load(MONITORING_CRDS.split("\n---\n")[0])
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = "changed"
    kubectl.ok("apply", "-f", "-", stdin=json.dumps(crd))
    after = _get(f"{url}/openapi/v3")["paths"]
    changed = {gv for gv in after if after[gv] != before.get(gv)}
    assert changed == {"apis/monitoring.coreos.com/v1"}
    document = _get(url + after["apis/monitoring.coreos.com/v1"]["serverRelativeURL"])
    rule = document["components"]["schemas"]["com.coreos.monitoring.v1.PrometheusRule"]
    assert rule["description"] == "changed"
    assert rule["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
