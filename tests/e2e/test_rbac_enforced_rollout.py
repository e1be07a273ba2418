"""deploy/ as installed, with RBAC enforced: `kubectl apply -k deploy/` against the emulator, the
controller run as the deploy/ ServiceAccount (a `kubectl create token` token) completes a rollout
with no request refused; and with any one grant of deploy/rbac.yaml removed, the controller's work is
refused (403) in the scenario that needs that grant. tests/ops/test_rbac.py checks the same grants
from the request log without enforcement; this is the API server's own verdict."""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from tests.ops.test_rbac import Grant, _mixed_owners, allowed, grants, needed
from upgrader.controller.intent import RolloutIntent
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.actions import Event
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.policy.policy import Policy
from upgrader.kube.api import ApiError, KubeApi
from upgrader.kube.cache import watch_paths
from upgrader.kube.client import api_client
from upgrader.kube.events import EventRecorder
from upgrader.kube.leader import LeaderElector
from upgrader.sim.apiserver.faults import RequestRecord
from upgrader.sim.apiserver.inprocess import in_process_client
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import add_dra_pod
from upgrader.sim.fleets.scenarios import build

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "upgrader-system"
KUBECTL = shutil.which("kubectl")
SPEC = {"maxParallelUpgrades": 2, "maxUnavailable": "50%",
        "drain": {"enable": True, "podSelector": "app=api-gateway", "deleteEmptyDir": True}}
MONITORING_CRDS = [("prometheusrules", "PrometheusRule"), ("servicemonitors", "ServiceMonitor")]
# Each scenario of tests/ops/test_rbac.py: the fleet, how many passes, and what it adds.
SCENARIOS: list[tuple[str, int, bool, bool]] = [
    ("healthy", 150, True, False), ("pdb-blocked", 20, False, False), ("healthy", 5, False, True)
]


def _monitoring_crd(plural: str, kind: str) -> dict[str, Any]:
    """The Prometheus Operator's CRDs deploy/ needs, schema-less (their schemas are not ours to test)."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                 "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}]},
    }


def _rbac_without(drop: Grant | None) -> list[dict[str, Any]]:
    """deploy/rbac.yaml's objects, with the one grant `drop` taken out of its rule."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()))
    for doc in docs:
        if drop is None or doc["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = doc["metadata"].get("namespace") if doc["kind"] == "Role" else None
        group, resource, verb, namespace = drop
        if namespace != scope:
            continue
        rules = []
        for rule in doc["rules"]:
            if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                rest = [r for r in rule["resources"] if r != resource]
                if rest:  # the other resources of the rule keep the verb
                    rules.append({**rule, "resources": rest})
                verbs = [v for v in rule["verbs"] if v != verb]
                if verbs:
                    rules.append({**rule, "resources": [resource], "verbs": verbs})
            else:
                rules.append(rule)
        doc["rules"] = rules
    return docs


def _install(cluster: EmulatedCluster, drop: Grant | None) -> str:
    """What `kubectl apply -k deploy/` creates that the controller's rights depend on, in process; the
    ServiceAccount's token."""
    cluster.create("namespaces", {"metadata": {"name": NAMESPACE}})
    account = yaml.safe_load((ROOT / "deploy" / "serviceaccount.yaml").read_text())
    cluster.create("serviceaccounts", {**account, "metadata": {**account["metadata"], "namespace": NAMESPACE}},
                   NAMESPACE)
    for doc in _rbac_without(drop):
        group, version = doc["apiVersion"].split("/")
        plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Role": "roles",
                  "RoleBinding": "rolebindings"}[doc["kind"]]
        scope = doc["metadata"].get("namespace")
        cluster.store.create(cluster.type(plural, group, version), scope, copy.deepcopy(doc))
    _rollout(cluster)
    return str(cluster.dispatcher.tokens.mint(NAMESPACE, "upgrader"))


def _rollout(cluster: EmulatedCluster) -> None:
    crds = cluster.type("customresourcedefinitions", "apiextensions.k8s.io")
    cluster.store.create(crds, None, yaml.safe_load((ROOT / "deploy" / "crd.yaml").read_text()))
    body = {"apiVersion": "gpu-upgrader.io/v1alpha1", "kind": "DriverRollout", "metadata": {"name": "default"},
            "spec": SPEC}
    cluster.store.create(cluster.type("driverrollouts", "gpu-upgrader.io", "v1alpha1"), None, body)


def _refused(cluster: EmulatedCluster) -> list[RequestRecord]:
    return [r for r in cluster.requests if r.status == 403]


def _drive(cluster: EmulatedCluster, client: k8s.ApiClient, passes: int, stop: Callable[[], bool]) -> None:
    """As tests/ops/test_rbac.py's run_controller: passes of `run --rollout default`, a repeated Event
    another process wrote, and the watches; `stop` ends it early."""
    settings = Settings(namespace=NAMESPACE, identity="rbac-enforced")
    api = KubeApi(client, sleep=lambda _: None, attempts=1)
    clock = cluster.store.clock.now
    elector = LeaderElector(api, NAMESPACE, settings.lease_name, settings.identity, 15, clock)
    controller = Controller(api, Policy(), settings, clock, elector)
    controller.intent = RolloutIntent(api, "default", settings)
    for _ in range(passes):
        controller.reconcile()
        if stop():
            return
        cluster.advance(1.0)
    elector.release()
    node = cluster.store.objects(cluster.type("nodes"))[0]["metadata"]["name"]
    halted = Event(node, "Warning", "rollout halted")
    try:
        for _ in range(2):
            EventRecorder(api, settings).record(halted, "", clock())
    except ApiError:  # refused: in the request log, which is what is judged
        pass
    for path, selector in watch_paths(settings):
        try:
            listed = api.request("list", "GET", path, {"limit": 1, "labelSelector": selector})
            for _ in api.watch(path, listed["metadata"]["resourceVersion"], 1, selector):
                pass
        except ApiError:  # a refused list or watch is in the request log, which is what is judged
            pass


def _scenario(index: int, drop: Grant | None, stop_on_refusal: bool) -> EmulatedCluster:
    scenario, passes, dra, mixed = SCENARIOS[index]
    cluster = EmulatedCluster.virtual(enforce_rbac=True)
    build(cluster, scenario)
    if dra:
        add_dra_pod(cluster)
    if mixed:
        _mixed_owners(cluster)
    token = _install(cluster, drop)
    _drive(cluster, in_process_client(cluster.dispatcher, token), passes,
           lambda: stop_on_refusal and bool(_refused(cluster)))
    return cluster


@pytest.fixture(scope="module")
def used() -> dict[Grant, int]:
    """With every grant: nothing refused in any scenario; which scenario first used each grant."""
    granted, first = grants(), {}
    for index in range(len(SCENARIOS)):
        cluster = _scenario(index, None, stop_on_refusal=False)
        assert _refused(cluster) == [], f"scenario {SCENARIOS[index][0]}: refused with every grant"
        for record in cluster.requests:
            grant = allowed(needed(record), granted)
            if grant is not None:
                first.setdefault(grant, index)
    return first


def test_every_grant_is_needed_the_api_server_refuses_without_it(used: dict[Grant, int]) -> None:
    granted = grants()
    assert set(used) == granted, f"grants no scenario used: {sorted(granted - set(used), key=str)}"
    unrefused = []
    for grant in sorted(granted, key=str):
        cluster = _scenario(used[grant], grant, stop_on_refusal=True)
        refused = {needed(r) for r in _refused(cluster)}
        if not refused or not any(allowed(n, {grant}) for n in refused):
            unrefused.append(grant)
    assert unrefused == [], f"removing these grants refused nothing: {unrefused}"


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed (not on PATH)")
def test_kubectl_apply_k_deploy_then_the_service_account_completes_a_rollout(tmp_path: Path) -> None:
    cluster = EmulatedCluster.virtual(enforce_rbac=True)
    build(cluster, "healthy")
    cluster.dispatcher.https = True  # kubectl sends a bearer token over https only
    cluster.serve()
    assert cluster.server is not None
    kubeconfig = cluster.server.write_kubeconfig(tmp_path / "kubeconfig")  # trusts the emulator's certificate
    base = [str(KUBECTL), "--kubeconfig", str(kubeconfig)]

    def kubectl(*args: str) -> str:
        done = subprocess.run([*base, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    try:
        (tmp_path / "monitoring.yaml").write_text(yaml.safe_dump_all([_monitoring_crd(*c) for c in MONITORING_CRDS]))
        kubectl("apply", "-f", str(tmp_path / "monitoring.yaml"))
        kubectl("apply", "-k", str(ROOT / "deploy"))
        kubectl("wait", "--for=condition=Established", "crd/driverrollouts.gpu-upgrader.io", "--timeout=30s")
        rollout = yaml.safe_load((ROOT / "deploy" / "rollout.yaml").read_text())
        (tmp_path / "rollout.yaml").write_text(yaml.safe_dump({**rollout, "spec": SPEC}))
        kubectl("apply", "-f", str(tmp_path / "rollout.yaml"))
        token = kubectl("create", "token", "upgrader", "-n", NAMESPACE).strip()
        client = api_client(str(kubeconfig))  # the emulator's address and certificate; the token is the SA's
        client.configuration.api_key = {"authorization": f"Bearer {token}"}
        nodes = [n["metadata"]["name"] for n in cluster.store.objects(cluster.type("nodes"))]

        def done() -> bool:
            return all((cluster.get("nodes", n) or {})["metadata"]["labels"].get(STATE_LABEL) == State.DONE.value
                       for n in nodes)

        _drive(cluster, client, 400, done)
        assert done(), "the rollout did not complete as the ServiceAccount"
        assert _refused(cluster) == []
        assert any(r.method == "PATCH" and r.resource == "nodes" for r in cluster.requests)
        phase = yaml.safe_load(kubectl("get", "driverrollout", "default", "-o", "yaml"))["status"]["phase"]
        assert phase == "Done"
    finally:
        cluster.stop()
