"""Opt-in RBAC enforcement, as kube-apiserver's RBAC authorizer decides.

A request is turned into kube-apiserver's request attributes (verb, API group, resource and
subresource, namespace, name; or a non-resource path) and allowed when a rule of a Role or
ClusterRole bound to its user, or to one of the user's groups, covers them. Roles and bindings are
read from the store at every request, so a `kubectl apply` of a Role counts at once. The bootstrap
roles every cluster has (cluster-admin, system:discovery, system:basic-user,
system:public-info-viewer) and their bindings are built in, not stored; a stored ClusterRole of the
same name takes the built-in one's place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.store import Store
from upgrader.sim.apiserver.tokens import ADMIN, TokenIssuer, User

if TYPE_CHECKING:
    from upgrader.sim.apiserver.faults import RequestRecord


class Request(Protocol):
    """What is read of api.py's Request (api.py imports this module: no import back)."""

    method: str
    path: str
    query: str
    headers: Any

Obj = dict[str, Any]
RBAC_GROUP = "rbac.authorization.k8s.io"
METHOD_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
NAMESPACE_SUBRESOURCES = ("status", "finalize")  # /namespaces/<ns>/<this> is the namespace's own

_DISCOVERY_URLS = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*"]
_PUBLIC_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
BOOTSTRAP_ROLES: dict[str, list[Obj]] = {
    "cluster-admin": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
    ],
    "system:discovery": [{"nonResourceURLs": [*_DISCOVERY_URLS, "/readyz", "/version", "/version/"], "verbs": ["get"]}],
    "system:public-info-viewer": [{"nonResourceURLs": _PUBLIC_URLS, "verbs": ["get"]}],
    "system:basic-user": [
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
            "verbs": ["create"],
        },
        {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
    ],
}
# ClusterRole -> the groups bound to it (kube-apiserver's bootstrap ClusterRoleBindings).
BOOTSTRAP_BINDINGS: dict[str, tuple[str, ...]] = {
    "cluster-admin": ("system:masters",),
    "system:discovery": ("system:authenticated",),
    "system:basic-user": ("system:authenticated",),
    "system:public-info-viewer": ("system:authenticated", "system:unauthenticated"),
}


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do, in the terms RBAC rules are written in."""

    user: User
    verb: str
    path: str
    resource_request: bool = False
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def attributes(user: User, method: str, path: str, query: str) -> Attributes:
    """kube-apiserver's request info: /api/v1/... and /apis/<group>/<version>/... with a resource are
    resource requests; anything shorter (/api, /apis/<group>/<version>, /version, /healthz, /openapi/...)
    is a path, its verb the lower-case method."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return Attributes(user, method.lower(), path)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
            rest = rest[2:]  # a namespaced resource; else the namespace itself
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    verb = METHOD_VERBS.get(method, method.lower())
    if not name and verb == "get":
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        verb = "watch" if params.get("watch", "").lower() in ("1", "true") else "list"
        name = _exact_name(params.get("fieldSelector", ""))  # a list of one object is that object's
    elif not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user, verb, path, True, group, rest[0], subresource, namespace, name)


def _exact_name(selector: str) -> str:
    for term in selector.split(","):
        field, op, value = term.partition("==") if "==" in term else term.partition("=")
        if op and field.strip() == "metadata.name":  # "!=" leaves "metadata.name!" here
            value = value.strip()
            if value not in ("", ".", "..") and "/" not in value and "%" not in value:
                return value
    return ""


def forbidden(attrs: Attributes, reasons: list[str]) -> errors.ApiError:
    """apimachinery's 403 for a request no rule allows (the RBAC authorizer's reasons appended)."""
    user = attrs.user.name
    if not attrs.resource_request:
        why = f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    else:
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        why = f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.group}" {scope}'
    unique = list(dict.fromkeys(reasons))
    if unique:
        why += ": RBAC: " + (unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]")
    details: Obj = {}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.group:
        details["group"] = attrs.group
    if attrs.resource:
        details["kind"] = attrs.resource
    if not attrs.resource_request:
        message = f"forbidden: {why}"
    else:
        qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
        named = f'{qualified} "{attrs.name}"' if attrs.name else qualified
        message = f"{named} is forbidden: {why}"
    return errors.ApiError(403, message, reason="Forbidden", details=details)


# ----- rules -------------------------------------------------------------------------------


def _has(values: Iterable[str], wanted: str) -> bool:
    return any(v == "*" or v == wanted for v in values)


def _resource_matches(resources: Iterable[str], attrs: Attributes) -> bool:
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    for resource in resources:
        if resource in ("*", combined):
            return True
        if attrs.subresource and resource == f"*/{attrs.subresource}":
            return True
    return False


def _url_matches(urls: Iterable[str], path: str) -> bool:
    return any(u == "*" or u == path or (u.endswith("*") and path.startswith(u[:-1])) for u in urls)


def rule_allows(rule: Obj, attrs: Attributes) -> bool:
    """Whether one PolicyRule covers the request."""
    if not _has(rule.get("verbs") or (), attrs.verb):
        return False
    if not attrs.resource_request:
        return _url_matches(rule.get("nonResourceURLs") or (), attrs.path)
    names = rule.get("resourceNames") or ()
    return (
        _has(rule.get("apiGroups") or (), attrs.group)
        and _resource_matches(rule.get("resources") or (), attrs)
        and (not names or attrs.name in names)
    )


def subject_matches(subject: Obj, user: User, binding_namespace: str) -> bool:
    """Whether a binding's subject is the user or one of its groups (a ServiceAccount subject of a
    RoleBinding without a namespace is in the binding's)."""
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return bool(name) and name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


class Authorizer:
    """Authenticates bearer tokens and authorises every request against the stored RBAC objects."""

    def __init__(self, store: Store, tokens: TokenIssuer) -> None:
        self.store = store
        self.tokens = tokens
        self._types = {
            plural: store.type(RBAC_GROUP, "v1", plural)
            for plural in ("roles", "clusterroles", "rolebindings", "clusterrolebindings")
        }

    def check(self, req: Request, record: RequestRecord) -> None:
        """Raise the 401 or 403 a request gets; the admin (no token, or the kubeconfig's) passes at once."""
        user = self.tokens.authenticate(req.headers.get("authorization"))
        if user is ADMIN:
            return
        attrs = attributes(user, req.method, req.path, req.query)
        allowed, reasons = self.decide(attrs)
        if not allowed:
            record.verb, record.resource, record.subresource = attrs.verb, attrs.resource, attrs.subresource
            record.namespace, record.name = attrs.namespace, attrs.name
            raise forbidden(attrs, reasons)

    def decide(self, attrs: Attributes) -> tuple[bool, list[str]]:
        """Allowed or not, and the errors met on the way (a binding to a role that does not exist)."""
        reasons: list[str] = []
        with self.store.lock:  # one consistent view of roles and bindings
            for rules in self._rules_for(attrs.user, attrs.namespace, reasons):
                if any(rule_allows(rule, attrs) for rule in rules):
                    return True, []
        return False, reasons

    def _rules_for(self, user: User, namespace: str, reasons: list[str]) -> Iterator[list[Obj]]:
        """The rules of every role bound to the user: bootstrap and ClusterRoleBindings, then the
        RoleBindings of the request's namespace (none for a cluster-scoped request or a path)."""
        for role, groups in BOOTSTRAP_BINDINGS.items():
            if any(g in user.groups for g in groups):
                yield self._cluster_role(role, reasons)
        for binding in self.store.objects(self._types["clusterrolebindings"]):
            if any(subject_matches(s, user, "") for s in binding.get("subjects") or ()):
                yield self._role_ref(binding, "", reasons)
        if namespace:
            for binding in self.store.objects(self._types["rolebindings"], namespace):
                if any(subject_matches(s, user, namespace) for s in binding.get("subjects") or ()):
                    yield self._role_ref(binding, namespace, reasons)

    def _role_ref(self, binding: Obj, namespace: str, reasons: list[str]) -> list[Obj]:
        ref = binding.get("roleRef") or {}
        kind, name = ref.get("kind"), ref.get("name", "")
        if kind == "ClusterRole":
            return self._cluster_role(name, reasons)
        if kind == "Role" and namespace:
            role = self.store.find(self._types["roles"], namespace, name)
            if role is None:
                reasons.append(f'role.{RBAC_GROUP} "{name}" not found')
                return []
            return list(role.get("rules") or ())
        reasons.append(f'unsupported role reference kind: "{kind}"')
        return []

    def _cluster_role(self, name: str, reasons: list[str]) -> list[Obj]:
        role = self.store.find(self._types["clusterroles"], None, name)
        if role is not None:
            return list(role.get("rules") or ())
        if name in BOOTSTRAP_ROLES:
            return BOOTSTRAP_ROLES[name]
        reasons.append(f'clusterrole.{RBAC_GROUP} "{name}" not found')
        return []
