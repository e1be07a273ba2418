"""The resource types the emulator serves, and how discovery describes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[str, ...] = ()  # "status", ...
    list_kind: str = ""
    # A custom resource's: its version's openAPIV3Schema (None: built in, or no schema) and
    # additionalPrinterColumns, as the CRD gives them. Not part of the type's identity.
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False, hash=False)

    @property
    def custom(self) -> bool:
        """Served from a CustomResourceDefinition (strategic merge patch is refused, as for CRs)."""
        return self.schema is not None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def group_version(self) -> str:
        return self.api_version

    def list_kind_name(self) -> str:
        return self.list_kind or f"{self.kind}List"

    def discovery(self) -> list[dict[str, Any]]:
        """APIResource entries for this type and its subresources."""
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        out = [entry]
        for sub in self.subresources:
            out.append(
                {
                    "name": f"{self.plural}/{sub}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        return out


def _t(group: str, version: str, plural: str, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
    return ResourceType(group, version, plural, kind, namespaced, **kw)


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _t("", "v1", "nodes", "Node", False, short_names=("no",), subresources=("status",)),
    _t("", "v1", "pods", "Pod", True, short_names=("po",), categories=("all",), subresources=("status",)),
    _t("", "v1", "namespaces", "Namespace", False, short_names=("ns",), subresources=("status",)),
    _t("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",)),
    _t("", "v1", "events", "Event", True, short_names=("ev",)),
    _t("", "v1", "services", "Service", True, short_names=("svc",), categories=("all",)),
    _t("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",)),
    _t(
        "apps",
        "v1",
        "daemonsets",
        "DaemonSet",
        True,
        short_names=("ds",),
        categories=("all",),
        subresources=("status",),
    ),
    _t("apps", "v1", "controllerrevisions", "ControllerRevision", True),
    _t(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        short_names=("deploy",),
        categories=("all",),
        subresources=("status",),
    ),
    _t(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        short_names=("rs",),
        categories=("all",),
        subresources=("status",),
    ),
    _t(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        short_names=("sts",),
        categories=("all",),
        subresources=("status",),
    ),
    _t("batch", "v1", "jobs", "Job", True, categories=("all",), subresources=("status",)),
    _t(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        short_names=("pdb",),
        subresources=("status",),
    ),
    _t("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",)),
    _t("coordination.k8s.io", "v1", "leases", "Lease", True),
    # RBAC objects (deploy/rbac.yaml); enforced only on an EmulatedCluster(enforce_rbac=True), see rbac.py.
    _t("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    _t("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    _t("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    _t("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    # Dynamic Resource Allocation: claims a DRA driver allocates (NVIDIA's is gpu.nvidia.com).
    _t("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, subresources=("status",)),
    _t(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        short_names=("crd", "crds"),
        subresources=("status",),
    ),
    _t(
        "nvidia.com",
        "v1",
        "clusterpolicies",
        "ClusterPolicy",
        False,
        subresources=("status",),
    ),
    _t(
        "nvidia.com",
        "v1alpha1",
        "nvidiadrivers",
        "NVIDIADriver",
        False,
        short_names=("nvd",),
        subresources=("status",),
    ),
)

# The eviction subresource, described the way kubectl's drain looks for it.
EVICTION_DISCOVERY = {
    "name": "pods/eviction",
    "singularName": "",
    "namespaced": True,
    "group": "policy",
    "version": "v1",
    "kind": "Eviction",
    "verbs": ["create"],
}


@dataclass
class Registry:
    """Types by (group, version, plural); custom resource definitions add to it at run time."""

    types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)

    @classmethod
    def default(cls) -> Registry:
        reg = cls()
        for t in BUILTIN_TYPES:
            reg.add(t)
        return reg

    def add(self, rtype: ResourceType) -> None:
        self.types[(rtype.group, rtype.version, rtype.plural)] = rtype

    def remove(self, group: str, version: str, plural: str) -> None:
        self.types.pop((group, version, plural), None)

    def serve_crd(self, crd: dict[str, Any]) -> None:
        """Serve a CustomResourceDefinition's types (an update replaces their schema and columns);
        a type the emulator builds in (NVIDIA's, whose CRDs fleet dumps carry) stays built in."""
        builtin = {t.key for t in BUILTIN_TYPES}
        for rtype in crd_types(crd):
            if rtype.key not in builtin:
                self.add(rtype)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for t in self.types.values():
            if t.api_version == api_version and t.kind == kind:
                return t
        return None

    def group_versions(self) -> dict[str, list[str]]:
        """Group name -> versions, core group excluded."""
        out: dict[str, list[str]] = {}
        for group, version, _ in self.types:
            if group and version not in out.setdefault(group, []):
                out[group].append(version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for (g, v, _), t in sorted(self.types.items()) if g == group and v == version]


def crd_types(crd: dict[str, Any]) -> list[ResourceType]:
    """The resource types a CustomResourceDefinition serves."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        out.append(
            ResourceType(
                group=spec.get("group", ""),
                version=version.get("name", "v1"),
                plural=names.get("plural", ""),
                kind=names.get("kind", ""),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular", ""),
                short_names=tuple(names.get("shortNames") or ()),
                subresources=("status",) if (version.get("subresources") or {}).get("status") is not None else (),
                schema=((version.get("schema") or {}).get("openAPIV3Schema")) or {"type": "object"},
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return out
