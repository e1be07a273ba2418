"""deploy/rbac.yaml grants exactly what the controller uses: every request allowed, every verb needed.

The controller runs whole rollouts against the emulator (in process, virtual clock) with leader
election, status writes, Events and its watches; every request it sends is checked against the
rendered rules, and every granted (group, resource, verb) must have been used.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from upgrader.controller.intent import RolloutIntent
from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.actions import Event
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.kube.cache import watch_paths
from upgrader.kube.events import EventRecorder
from upgrader.kube.leader import LeaderElector
from upgrader.sim.apiserver.faults import RequestRecord
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.builders import add_dra_pod
from upgrader.sim.fleets.scenarios import build

ROOT = Path(__file__).resolve().parent.parent.parent
NAMESPACE = "upgrader-system"
Grant = tuple[str, str, str, str | None]  # group, resource, verb, namespace (None: cluster-wide)


def grants() -> set[Grant]:
    out: set[Grant] = set()
    for doc in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()):
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = doc["metadata"].get("namespace") if doc["kind"] == "Role" else None
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((group, resource, verb, scope))
    return out


def needed(record: RequestRecord) -> Grant:
    parts = record.path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    resource = record.resource + (f"/{record.subresource}" if record.subresource else "")
    return (group, resource, record.verb, record.namespace or None)


def allowed(need: Grant, granted: set[Grant]) -> Grant | None:
    group, resource, verb, namespace = need
    for grant in ((group, resource, verb, None), (group, resource, verb, namespace)):
        if grant in granted:
            return grant
    return None


def _mixed_owners(cluster: EmulatedCluster) -> None:
    """One driver DaemonSet an NVIDIADriver owns, the other owned by nothing: the interlocks then GET the
    NVIDIADriver and LIST the ClusterPolicies (core/fleet/interlocks.py)."""
    driver = cluster.create("nvidiadrivers", {"metadata": {"name": "r550"}, "spec": {}}, None, "nvidia.com", "v1alpha1")
    owner = {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "name": "r550",
             "uid": driver["metadata"]["uid"], "controller": True}
    rtype = cluster.type("daemonsets", "apps")
    names = sorted(d["metadata"]["name"] for d in cluster.store.objects(rtype, "gpu-operator")
                   if "nvidia-driver" in d["metadata"]["name"])
    for name, refs in zip(names, ([owner], []), strict=False):
        cluster.store.mutate(
            rtype, "gpu-operator", name, lambda d, r=refs: d["metadata"].__setitem__("ownerReferences", r)
        )


def install_rollout(cluster: EmulatedCluster, spec: dict[str, object], name: str = "default") -> None:
    """deploy/crd.yaml, and a DriverRollout with `spec`."""
    crds = cluster.type("customresourcedefinitions", "apiextensions.k8s.io")
    cluster.store.create(crds, None, yaml.safe_load((ROOT / "deploy" / "crd.yaml").read_text()))
    body = {"apiVersion": "gpu-upgrader.io/v1alpha1", "kind": "DriverRollout", "metadata": {"name": name}, "spec": spec}
    cluster.store.create(cluster.type("driverrollouts", "gpu-upgrader.io", "v1alpha1"), None, body)


def run_controller(scenario: str, seconds: int, dra: bool = False, mixed_owners: bool = False) -> list[RequestRecord]:
    cluster = EmulatedCluster.virtual()
    build(cluster, scenario)
    if dra:
        add_dra_pod(cluster)
    if mixed_owners:
        _mixed_owners(cluster)
    cluster.create("namespaces", {"metadata": {"name": NAMESPACE}})
    settings = Settings(namespace=NAMESPACE, identity="rbac-check")
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    clock = cluster.store.clock.now
    elector = LeaderElector(api, NAMESPACE, settings.lease_name, settings.identity, 15, clock)
    spec = {
        "maxParallelUpgrades": 2,
        "maxUnavailable": "50%",
        "drain": {"enable": True, "podSelector": "app=api-gateway", "deleteEmptyDir": True},
    }
    # As deploy/ runs it: the intent is the DriverRollout object (`run --rollout default`).
    install_rollout(cluster, spec)
    controller = Controller(api, policy_from_mapping(spec), settings, clock, elector)
    controller.intent = RolloutIntent(api, "default", settings)
    for _ in range(seconds):
        controller.reconcile()
        cluster.advance(1.0)
    elector.release()
    # A restarted controller repeating an Event another process wrote counts it on (create, 409, get, patch).
    halted = Event(cluster.store.objects(cluster.type("nodes"))[0]["metadata"]["name"], "Warning", "rollout halted")
    EventRecorder(api, settings).record(halted, "", clock())
    EventRecorder(api, settings).record(halted, "", clock())
    for path, selector in watch_paths(settings):
        listed = api.request("list", "GET", path, {"limit": 1, "labelSelector": selector})
        for _ in api.watch(path, listed["metadata"]["resourceVersion"], 1, selector):
            pass
    return cluster.requests


@pytest.fixture(scope="module")
def requests() -> list[RequestRecord]:
    return (
        run_controller("healthy", 150, dra=True)
        + run_controller("pdb-blocked", 20)
        + run_controller("healthy", 5, mixed_owners=True)
    )


def test_every_request_the_controller_makes_is_granted(requests: list[RequestRecord]) -> None:
    granted = grants()
    denied = sorted({needed(r) for r in requests if allowed(needed(r), granted) is None}, key=str)
    assert denied == [], f"the ClusterRole/Role lack: {denied}"


def test_every_granted_verb_is_used(requests: list[RequestRecord]) -> None:
    granted = grants()
    used = {allowed(needed(r), granted) for r in requests}
    assert sorted(granted - used, key=str) == [], "grants the controller never uses (not least privilege)"


def test_the_run_exercised_the_interesting_calls(requests: list[RequestRecord]) -> None:
    kinds = {(r.verb, r.resource, r.subresource) for r in requests}
    assert {
        ("create", "pods", "eviction"),
        ("delete", "pods", ""),
        ("patch", "nodes", ""),
        ("create", "events", ""),
        ("patch", "events", ""),
        ("list", "resourceclaims", ""),
        ("update", "leases", ""),
        ("watch", "nodes", ""),
        ("get", "driverrollouts", ""),
        ("patch", "driverrollouts", "status"),
    } <= kinds
