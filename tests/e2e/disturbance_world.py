"""The harness of the disturbance tests (issue 11): `World`, an emulated fleet with upgrader's controller on
its virtual clock and an admin with kubectl rights, the shared policy and zones, and what reads runbooks and starts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.states import IN_PROGRESS, STATE_LABEL, State
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.core.report.document import to_dict
from upgrader.kube.api import KubeApi
from upgrader.kube.leader import LeaderElector
from upgrader.sim.apiserver.faults import RequestRecord
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.builders import OPERATOR_NS
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder

POLICY: dict[str, Any] = {"maxParallelUpgrades": 2, "maxUnavailable": "50%", "failureDomains": {"canary": "us-east-1a"}}
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
ZONE_LABEL = "topology.kubernetes.io/zone"
UPGRADER = "upgrader/test"
ADMIN = "kubectl/v1.31.0 (admin)"
RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
IN_PROGRESS_VALUES = {s.value for s in IN_PROGRESS}


class World:
    """An emulated fleet, upgrader's controller on its virtual clock, and an admin with kubectl rights."""

    def __init__(
        self,
        policy: dict[str, Any],
        scenario: str = "healthy",
        nodes: int = 6,
        sim: SimSettings | None = None,
        before: Callable[[World], None] | None = None,
    ) -> None:
        """`before`: what the admin does before the rollout (and before the recording starts)."""
        self.cluster = EmulatedCluster.virtual(settings=sim) if sim else EmulatedCluster.virtual()
        self.info = build(self.cluster, scenario, nodes, job_seconds=1)  # nightly jobs done before any drain
        admin = self.cluster.client()
        admin.user_agent = ADMIN
        self.core, self.apps = k8s.CoreV1Api(admin), k8s.AppsV1Api(admin)
        if before is not None:
            before(self)
        self.recorder = RolloutRecorder(self.cluster)
        self.policy = policy_from_mapping(policy)
        self.controller = self.new_controller(self.policy)
        self.status: dict[str, Any] = {}

    def new_controller(self, policy: Policy, identity: str = "e2e", lease_seconds: float | None = None) -> Controller:
        """A controller process (a restart is a new one), leader-elected when `lease_seconds` is given; its
        requests carry UPGRADER in their User-Agent."""
        client = self.cluster.client()
        client.user_agent = f"{UPGRADER} ({identity})"
        api, clock = KubeApi(client, sleep=lambda _: None), self.cluster.store.clock.now
        settings = Settings(identity=identity, lease_duration_seconds=lease_seconds or 15.0)
        elector = None
        if lease_seconds is not None:
            elector = LeaderElector(api, settings.namespace, settings.lease_name, identity, lease_seconds, clock)
        return Controller(api, policy, settings, clock, elector)

    @property
    def now(self) -> float:
        return self.cluster.store.clock.now()

    @property
    def domain_of(self) -> dict[str, str]:
        return {n: z for z, nodes in self.info.domains.items() for n in nodes}

    def get(self, plural: str, name: str, namespace: str | None = None, group: str = "") -> dict[str, Any]:
        found = self.cluster.get(plural, name, namespace, group)
        assert found is not None, f"{plural} {name}"
        return found

    def node(self, name: str) -> dict[str, Any]:
        return self.get("nodes", name)

    def state(self, name: str) -> str | None:
        return self.node(name)["metadata"]["labels"].get(STATE_LABEL)

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("annotations") or {})

    def cordoned(self, name: str) -> bool:
        return bool(self.node(name)["spec"].get("unschedulable"))

    def step(self) -> dict[str, Any]:
        """One pass, then a virtual second for the emulator's controllers and kubelets."""
        status = self.controller.reconcile().status
        self.status = to_dict(status) if status is not None else self.status  # as `upgrader status -o json` shows it
        self.cluster.advance(1)
        return self.status

    def run_until(self, done: Callable[[], bool], limit: int = 300, what: str = "the condition") -> None:
        for _ in range(limit):
            if done():
                return
            self.step()
        raise AssertionError(f"{what} not reached in {limit} passes; status: {self.status.get('message')}")

    def run(self, passes: int) -> dict[str, Any]:
        for _ in range(passes):
            self.step()
        return self.status

    def run_to_done(self, limit: int = 300) -> dict[str, Any]:
        self.run_until(lambda: self.status.get("phase") == "Done", limit, "phase Done")
        return self.status

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.core.patch_node(name, body)

    def label(self, name: str, key: str, value: str | None) -> None:
        self.patch_node(name, {"metadata": {"labels": {key: value}}})

    def annotate(self, name: str, changes: dict[str, str | None]) -> None:
        self.patch_node(name, {"metadata": {"annotations": changes}})

    def stored_status(self) -> tuple[str, dict[str, Any]]:
        """The status ConfigMap as `upgrader status` reads it: its message and status.json."""
        cm = self.get("configmaps", "gpu-driver-upgrade-status", OPERATOR_NS)
        return cm["data"]["message"], json.loads(cm["data"]["status.json"])

    def events(self, node: str, kind: str | None = None) -> list[str]:
        return [
            e["message"]
            for e in self.cluster.store.objects(self.cluster.type("events"))
            if e["involvedObject"]["name"] == node and e["reason"] == "GPUDriverUpgrade" and kind in (None, e["type"])
        ]

    def entered(self, node: str, state: State, after: float = 0.0) -> float:
        """When the node entered `state` (the first time after `after`), on the virtual clock."""
        records = self.recorder.records
        return next(r.time for r in records if r.node == node and r.state == state.value and r.time >= after)

    def ours(self, since: int = 0) -> list[RequestRecord]:
        return [r for r in self.cluster.requests[since:] if r.user_agent.startswith(UPGRADER)]

    def driver_pods(self, node: str) -> dict[str, str]:
        """name -> uid of the driver pods on the node."""
        return {
            p["metadata"]["name"]: p["metadata"]["uid"]
            for p in self.cluster.store.objects(self.cluster.type("pods"), OPERATOR_NS)
            if p["spec"].get("nodeName") == node and p["metadata"]["labels"].get("app") == "nvidia-driver-daemonset"
        }

    def driver_daemonset(self, node: str) -> dict[str, Any]:
        """The driver DaemonSet of the node's one driver pod."""
        (pod,) = self.driver_pods(node)
        owner = self.get("pods", pod, OPERATOR_NS)["metadata"]["ownerReferences"][0]["name"]
        return self.get("daemonsets", owner, OPERATOR_NS, "apps")


def runbook_line(name: str, **values: str) -> str:
    """The status message a runbook shows under "What you see", its <placeholders> filled in."""
    text = (RUNBOOKS / name).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("PHASE: Halted"))
    message = line.removeprefix("PHASE: Halted").strip()
    return re.sub(r"<(\w+)>", lambda m: values[m.group(1)], message)


def starts_after(world: World, since: float) -> list[str]:
    return [s.node for s in world.recorder.starts() if s.time >= since]
