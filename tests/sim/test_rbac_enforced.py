"""RBAC enforcement in the emulator (EmulatedCluster(enforce_rbac=True)): ServiceAccount tokens, the
401 and 403 answers in kube-apiserver's words, and rules read from the store at every request.

Most tests call the dispatcher in process on a virtual clock; one drives the real kubectl against an
enforcing emulator served over HTTPS (kubectl sends a token to an https server only), as
`upgrader sim serve --enforce-rbac` serves it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.sim.builders import node_body, pod_body, status_of
from upgrader.commands.cli import build_parser
from upgrader.sim.apiserver.api import Request
from upgrader.sim.apiserver.inprocess import in_process_client
from upgrader.sim.cluster import EmulatedCluster

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parent.parent.parent
SA_NS = "upgrader-system"
USER = f"system:serviceaccount:{SA_NS}:upgrader"
RBAC = "rbac.authorization.k8s.io"


def deny(verb: str, resource: str, group: str = "", scope: str = 'in the namespace "default"') -> str:
    return f'User "{USER}" cannot {verb} resource "{resource}" in API group "{group}" {scope}'


class Api:
    """An enforcing cluster with the upgrader ServiceAccount, and raw requests with its token."""

    def __init__(self) -> None:
        self.cluster = EmulatedCluster.virtual(enforce_rbac=True)
        self.cluster.create("namespaces", {"metadata": {"name": SA_NS}})
        self.cluster.create("serviceaccounts", {"metadata": {"name": "upgrader"}}, SA_NS)
        self.token = self.cluster.dispatcher.tokens.mint(SA_NS, "upgrader")

    def call(
        self, method: str, path: str, body: Any = None, query: str = "", token: str | None = ""
    ) -> tuple[int, Obj]:
        """The status and body of a request; `token` "": the ServiceAccount's, None: none."""
        headers = {"content-type": "application/merge-patch+json"}
        if token is not None:
            headers["authorization"] = f"Bearer {token or self.token}"
        raw = json.dumps(body).encode() if body is not None else b""
        response = self.cluster.dispatcher.handle(Request(method, path, query, headers, raw))
        try:
            return response.status, json.loads(response.body)
        except ValueError:
            return response.status, {}

    def status(self, method: str, path: str, body: Any = None, query: str = "") -> int:
        return self.call(method, path, body, query)[0]

    def message(self, method: str, path: str, body: Any = None, query: str = "") -> str:
        code, status = self.call(method, path, body, query)
        assert code == 403 and status["reason"] == "Forbidden", (code, status)
        return str(status["message"])

    def rbac(self, kind: str, body: Obj, namespace: str | None = None) -> None:
        plural = {"Role": "roles", "ClusterRole": "clusterroles"}.get(kind) or f"{kind.lower()}s"
        self.cluster.create(plural, {"apiVersion": f"{RBAC}/v1", "kind": kind, **body}, namespace, RBAC)


@pytest.fixture
def api() -> Api:
    return Api()


def deploy_rbac(api: Api) -> None:
    for doc in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()):
        api.rbac(doc["kind"], doc, doc["metadata"].get("namespace"))


# ----- refusals in apimachinery's words -----------------------------------------------------


def test_denials_name_user_verb_resource_and_scope(api: Api) -> None:
    code, status = api.call("DELETE", "/api/v1/namespaces/default/pods/x")
    assert (code, status) == (
        403,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f'pods "x" is forbidden: {deny("delete", "pods")}',
            "reason": "Forbidden",
            "details": {"name": "x", "kind": "pods"},
            "code": 403,
        },
    )
    assert api.message("GET", "/api/v1/nodes/n1") == (
        f'nodes "n1" is forbidden: {deny("get", "nodes", scope="at the cluster scope")}'
    )
    assert api.message("GET", "/api/v1/namespaces/default/pods") == (
        f"pods is forbidden: {deny('list', 'pods')}"
    )
    assert api.message("POST", "/api/v1/namespaces/default/pods/x/eviction", {}) == (
        f'pods "x" is forbidden: {deny("create", "pods/eviction")}'
    )
    code, status = api.call("PATCH", "/apis/apps/v1/namespaces/default/daemonsets/d/status", {})
    assert status["details"] == {"name": "d", "group": "apps", "kind": "daemonsets"}
    assert status["message"] == (
        f'daemonsets.apps "d" is forbidden: {deny("patch", "daemonsets/status", "apps")}'
    )
    assert api.message("GET", "/metrics") == f'forbidden: User "{USER}" cannot get path "/metrics"'
    # What every authenticated user may read (system:discovery, system:public-info-viewer).
    for path in ("/api", "/api/v1", "/apis", "/apis/apps/v1", "/version", "/healthz"):
        assert api.status("GET", path) == 200, path


def test_unknown_expired_or_orphaned_tokens_are_unauthorized(api: Api) -> None:
    unauthorized = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
    assert api.call("GET", "/version", token="not-a-token") == (401, unauthorized)
    forged = api.token[:-4] + ("AAAA" if not api.token.endswith("AAAA") else "BBBB")
    assert api.call("GET", "/version", token=forged)[0] == 401
    # No token and the kubeconfig's own: the admin, as every other test uses the emulator.
    assert api.call("DELETE", "/api/v1/namespaces/default/pods/x", token=None)[0] == 404
    assert api.call("DELETE", "/api/v1/namespaces/default/pods/x", token="emulator")[0] == 404
    api.cluster.advance(3600)
    assert api.call("GET", "/version")[0] == 401  # its hour is up
    fresh = api.cluster.dispatcher.tokens.mint(SA_NS, "upgrader")
    assert api.call("GET", "/version", token=fresh)[0] == 200
    api.cluster.store.delete(api.cluster.type("serviceaccounts"), SA_NS, "upgrader")
    api.cluster.create("serviceaccounts", {"metadata": {"name": "upgrader"}}, SA_NS)
    assert api.call("GET", "/version", token=fresh)[0] == 401  # a token of the deleted account


def test_off_by_default_any_token_is_the_admin() -> None:
    cluster = EmulatedCluster.virtual()
    request = Request("GET", "/api/v1/nodes", headers={"authorization": "Bearer not-a-token"})
    assert cluster.dispatcher.rbac is None and cluster.dispatcher.handle(request).status == 200


# ----- rules and bindings -------------------------------------------------------------------


def test_deploy_rbac_grants_the_controllers_calls_and_no_more(api: Api) -> None:
    deploy_rbac(api)
    api.cluster.create("nodes", node_body("n1"))
    assert api.status("GET", "/api/v1/nodes") == 200
    assert api.status("GET", "/api/v1/nodes", query="watch=true&timeoutSeconds=1") == 200
    assert api.status("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"a": "b"}}}) == 200
    assert api.message("GET", "/api/v1/nodes/n1").endswith(
        'cannot get resource "nodes" in API group "" at the cluster scope'
    )
    assert api.message("PATCH", "/api/v1/nodes/n1/status", {}).endswith(
        'cannot patch resource "nodes/status" in API group "" at the cluster scope'
    )
    assert api.status("DELETE", "/api/v1/namespaces/default/pods/x") == 404  # allowed, then not found
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "x", "namespace": "default"}}
    assert api.status("POST", "/api/v1/namespaces/default/pods/x/eviction", eviction) == 404
    assert api.message("DELETE", "/api/v1/namespaces/default/pods").endswith(
        'cannot deletecollection resource "pods" in API group "" in the namespace "default"'
    )
    # driverrollouts/status: allowed by the ClusterRole, so the answer is the 404 of a CRD not installed.
    assert api.status("PATCH", "/apis/gpu-upgrader.io/v1alpha1/driverrollouts/default/status", {}) == 404
    assert api.message("PATCH", "/apis/gpu-upgrader.io/v1alpha1/driverrollouts/default", {}).endswith(
        'cannot patch resource "driverrollouts" in API group "gpu-upgrader.io" at the cluster scope'
    )
    # The Role counts in its namespace only.
    leases = "/apis/coordination.k8s.io/v1/namespaces/{}/leases"
    assert api.status("POST", leases.format(SA_NS), {"metadata": {"name": "upgrader"}}) == 201
    assert api.message("POST", leases.format("default"), {"metadata": {"name": "upgrader"}}).endswith(
        'cannot create resource "leases" in API group "coordination.k8s.io" in the namespace "default"'
    )
    assert api.message("GET", f"/api/v1/namespaces/{SA_NS}/configmaps", query="watch=1").endswith(
        f'cannot watch resource "configmaps" in API group "" in the namespace "{SA_NS}"'
    )


def test_group_subjects_resource_names_and_missing_roles(api: Api) -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get", "list"]}
    api.rbac("Role", {"metadata": {"name": "one-map"}, "rules": [rule]}, "default")
    group = {"kind": "Group", "apiGroup": RBAC, "name": f"system:serviceaccounts:{SA_NS}"}
    ref = {"apiGroup": RBAC, "kind": "Role", "name": "one-map"}
    api.rbac("RoleBinding", {"metadata": {"name": "one-map"}, "roleRef": ref, "subjects": [group]}, "default")
    maps = "/api/v1/namespaces/default/configmaps"
    assert api.status("GET", f"{maps}/a") == 404  # allowed (and absent)
    assert api.message("GET", f"{maps}/b").startswith('configmaps "b" is forbidden')
    assert api.message("GET", maps).startswith("configmaps is forbidden")  # a list names no object
    assert api.status("GET", maps, query="fieldSelector=metadata.name%3Da") == 200  # ... unless it selects one
    # A binding to a role that does not exist: kube-apiserver says so after the refusal.
    sa = {"kind": "ServiceAccount", "name": "upgrader", "namespace": SA_NS}
    missing = {"apiGroup": RBAC, "kind": "ClusterRole", "name": "nope"}
    api.rbac("ClusterRoleBinding", {"metadata": {"name": "nope"}, "roleRef": missing, "subjects": [sa]})
    assert api.message("GET", "/api/v1/nodes") == (
        f'nodes is forbidden: User "{USER}" cannot list resource "nodes" in API group "" at the cluster scope: '
        f'RBAC: clusterrole.{RBAC} "nope" not found'
    )
    # Wildcards and */subresource.
    wide = {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]}
    api.rbac("ClusterRole", {"metadata": {"name": "nope"}, "rules": [wide]})
    assert api.status("PATCH", "/api/v1/nodes/n1/status", {}) == 404
    assert api.message("GET", "/api/v1/nodes").endswith("at the cluster scope")  # the role exists now


def test_a_role_edited_counts_at_once(api: Api) -> None:
    admin = k8s.RbacAuthorizationV1Api(api.cluster.client())
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
    api.rbac("Role", {"metadata": {"name": "pods"}, "rules": [rule]}, "default")
    sa = {"kind": "ServiceAccount", "name": "upgrader", "namespace": SA_NS}
    ref = {"apiGroup": RBAC, "kind": "Role", "name": "pods"}
    api.rbac("RoleBinding", {"metadata": {"name": "pods"}, "roleRef": ref, "subjects": [sa]}, "default")
    assert api.status("GET", "/api/v1/namespaces/default/pods") == 200
    admin.patch_namespaced_role("pods", "default", {"rules": [{**rule, "verbs": ["get"]}]})
    assert api.message("GET", "/api/v1/namespaces/default/pods").startswith("pods is forbidden")
    admin.delete_namespaced_role("pods", "default")
    assert api.message("GET", "/api/v1/namespaces/default/pods/x").endswith(f'RBAC: role.{RBAC} "pods" not found')


# ----- TokenRequest and the official client --------------------------------------------------


def test_token_request_through_the_official_client(api: Api) -> None:
    admin = k8s.CoreV1Api(api.cluster.client())
    answer = admin.create_namespaced_service_account_token("upgrader", SA_NS, {"spec": {}})
    assert answer.kind == "TokenRequest" and answer.spec.expiration_seconds == 3600
    assert answer.spec.audiences == ["https://kubernetes.default.svc.cluster.local"]
    assert answer.status.expiration_timestamp.isoformat() == "2026-01-01T01:00:00+00:00"
    with pytest.raises(ApiException) as invalid:
        admin.create_namespaced_service_account_token("upgrader", SA_NS, {"spec": {"expirationSeconds": 5}})
    assert status_of(invalid.value)["message"] == (
        'TokenRequest.authentication.k8s.io "upgrader" is invalid: spec.expirationSeconds: '
        "Invalid value: 5: may not specify a duration less than 10 minutes"
    )
    with pytest.raises(ApiException) as absent:
        admin.create_namespaced_service_account_token("nobody", SA_NS, {"spec": {}})
    assert absent.value.status == 404
    # The token, sent by the official client, is the ServiceAccount (refused until bound).
    core = k8s.CoreV1Api(in_process_client(api.cluster.dispatcher, answer.status.token))
    api.cluster.create("pods", pod_body("p", node="n1"), "default")
    with pytest.raises(ApiException) as refused:
        core.delete_namespaced_pod("p", "default")
    assert (refused.value.status, refused.value.reason) == (403, "Forbidden")
    assert status_of(refused.value)["message"].startswith(f'pods "p" is forbidden: User "{USER}" cannot delete')
    deploy_rbac(api)
    core.delete_namespaced_pod("p", "default")


def test_sim_serve_takes_enforce_rbac() -> None:
    parse = build_parser().parse_args
    assert parse(["sim", "serve", "--kubeconfig", "k", "--enforce-rbac"]).enforce_rbac is True
    assert parse(["sim", "serve", "--kubeconfig", "k"]).enforce_rbac is False


# ----- the real kubectl ---------------------------------------------------------------------


@pytest.mark.kubectl
def test_kubectl_create_token_then_refused_until_a_binding_is_applied(tmp_path: Path) -> None:
    kubectl, openssl = shutil.which("kubectl"), shutil.which("openssl")
    if kubectl is None or openssl is None:
        pytest.skip("needs kubectl and openssl (an enforcing emulator serves HTTPS) on PATH")
    cluster = EmulatedCluster(enforce_rbac=True)
    cluster.dispatcher.https = True  # as `sim serve --enforce-rbac`: kubectl sends tokens to https only
    cluster.create("nodes", node_body("gpu-a-01"))
    cluster.serve()
    assert cluster.server is not None and cluster.server.url.startswith("https://")
    kubeconfig = cluster.server.write_kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [kubectl, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), *args]
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)

    try:
        deploy = ROOT / "deploy"
        setup = run("apply", "-f", str(deploy / "namespace.yaml"), "-f", str(deploy / "serviceaccount.yaml"))
        assert setup.stdout == "namespace/upgrader-system created\nserviceaccount/upgrader created\n", setup.stderr
        created = run("create", "token", "upgrader", "-n", SA_NS)
        assert created.returncode == 0 and created.stdout.count(".") == 2, created.stderr
        token = created.stdout.strip()

        refused = run("--token", token, "get", "nodes")
        assert (refused.returncode, refused.stdout, refused.stderr) == (
            1,
            "",
            f'Error from server (Forbidden): nodes is forbidden: User "{USER}" cannot list resource "nodes" '
            'in API group "" at the cluster scope\n',
        )
        bogus = run("--token", "not-a-token", "get", "nodes")
        assert bogus.stderr == "error: You must be logged in to the server (Unauthorized)\n"

        applied = run("apply", "-f", str(ROOT / "deploy" / "rbac.yaml"))
        assert applied.stdout.splitlines()[:2] == [
            f"clusterrole.{RBAC}/upgrader created",
            f"clusterrolebinding.{RBAC}/upgrader created",
        ], applied.stderr
        allowed = run("--token", token, "get", "nodes", "-o", "name")
        assert (allowed.returncode, allowed.stdout, allowed.stderr) == (0, "node/gpu-a-01\n", "")
    finally:
        cluster.stop()
