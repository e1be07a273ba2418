"""The disturbances where features meet (issue 42): GPU pods that reach a node without the scheduler (pinned
by `nodeName`, a DaemonSet's), a cordon an admin puts on after upgrader's own was lifted and the node sent
back, a node moved to another pool before its start, the pools' budgets edited, the rollout object and its
CRD deleted and created again, and taints of someone else's under our key; with the checks only they need
(docs/policy.md#the-restarts-admission-guard, #the-cordon-records-lifetime, #a-node-counts-where-it-started,
#only-our-taint; docs/operations.md#the-rollout-object-deleted)."""

from __future__ import annotations

import contextlib
import copy
import time
from typing import Any

from upgrader.core.model.states import IN_PROGRESS, OUR_CORDON, STATE_LABEL, WAS_UNSCHEDULABLE, State
from upgrader.core.policy.rollout_object import GROUP, PLURAL, VERSION
from upgrader.sim.apiserver.errors import ApiError
from upgrader.sim.controllers.settings import GPU
from upgrader.sim.fleets.builders import PRODUCTS

from .campaign_world import FOREIGN_VALUE, MERGE, ROLLOUT, TRAINING, create_rollout
from .writers_and_clocks import OtherWriters

FEATURE_KINDS = {  # disturbance -> the FeatureWriters method that applies it
    "GPU pod pinned by nodeName": "pinned_gpu_pod",
    "GPU client DaemonSet": "gpu_daemonset",
    "admin cordon after upgrader's was lifted": "cordon_after_ours",
    "node moved to another pool before its start": "pool_move",
    "pool budgets edited": "pool_budgets",
    "rollout object deleted and created again": "object_recreated",
    "CRD deleted and created again": "crd_recreated",
    "someone else's taint with our key": "foreign_taint",
}
TAINT_KEY = "gpu-upgrader.io/upgrade-pending"
LATE = {State.POD_DELETION_REQUIRED.value, State.DRAIN_REQUIRED.value, State.POD_RESTART_REQUIRED.value}
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
PRODUCT = "nvidia.com/gpu.product"


def gpu_spec(**extra: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base", "resources": {"limits": {GPU: "1"}}}
    return {"terminationGracePeriodSeconds": 1, "containers": [container], **extra}


class FeatureWriters(OtherWriters):
    """The Disturber's part for FEATURE_KINDS (and, through OtherWriters, for KINDS)."""

    def init_feature_writers(self) -> None:
        self.made = 0
        self.moved: set[str] = set()
        self.planted: dict[str, dict[str, str]] = {}  # node -> the taint of someone else's put on it
        self.object_gone = False
        self.feature_problems: list[str] = []

    # ----- GPU users that skip the scheduler --------------------------------------------------------

    def pinned_gpu_pod(self) -> bool:
        """A GPU pod pinned to a node in the last steps before its restart (a Job recreating its pod)."""
        late = [n for n in self.w.info.nodes if self.label(n) in LATE]
        if not late:
            return False
        node, self.made = self.rng.choice(late), self.made + 1
        body = {"metadata": {"name": f"pinned-{self.made}", "labels": {"app": "pinned-gpu-user"}},
                "spec": gpu_spec(nodeName=node)}
        self.w.cluster.create("pods", body, "default")
        return True

    def gpu_daemonset(self) -> bool:
        """A GPU client DaemonSet on a node in progress (tolerating the cordon, as DaemonSets do), gone
        again seconds later."""
        busy = [n for n in self.w.info.nodes if self.label(n) in {s.value for s in IN_PROGRESS}]
        if not busy:
            return False
        node, self.made = self.rng.choice(busy), self.made + 1
        name, labels = f"gpu-client-{self.made}", {"app": f"gpu-client-{self.made}"}
        template = {"metadata": {"labels": labels},
                    "spec": gpu_spec(nodeSelector={"kubernetes.io/hostname": node}, tolerations=[UNSCHEDULABLE])}
        ds = {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": labels}, "template": template}}
        self.w.cluster.create("daemonsets", ds, "default", "apps")

        def gone() -> None:
            with contextlib.suppress(ApiError):
                self.w.cluster.store.delete(self.w.cluster.type("daemonsets", "apps"), "default", name)

        self.do_later(self.rng.uniform(4.0, 8.0), "the DaemonSet deleted", gone)
        return True

    # ----- cordons after ours ----------------------------------------------------------------------

    def cordon_after_ours(self) -> bool:
        """A person sends a node upgrader cordoned back to upgrade-required and uncordons it; once upgrader
        has seen its cordon gone, an admin cordons the node for a repair: that cordon must stay."""
        ours = [n for n in self.w.info.nodes if self.cordoned(n)
                and self._annotations(n).get(OUR_CORDON) == "true"
                and self.label(n) in {*(s.value for s in IN_PROGRESS), State.FAILED.value}]
        if not ours:
            return False
        node = self.rng.choice(ours)
        self.patch("admin", node, {"metadata": {"labels": {STATE_LABEL: State.UPGRADE_REQUIRED.value}},
                                   "spec": {"unschedulable": None}})
        self._cordon_once_seen(node, 40)
        return True

    def _cordon_once_seen(self, node: str, tries: int) -> None:
        def check() -> None:
            if self.cordoned(node) or self._annotations(node).get(OUR_CORDON):
                self.figures.counts["admin cordon after ours: started again first"] += 1
            elif self._annotations(node).get(WAS_UNSCHEDULABLE) == "true":
                self.patch("admin", node, {"spec": {"unschedulable": True}})
                self.figures.counts["admin cordons after upgrader's was lifted"] += 1
                self.later.append((self._now() + self.rng.uniform(3.0, 8.0), "ticket closed", node))
            elif tries > 0:
                self._cordon_once_seen(node, tries - 1)

        self.do_later(0.1, "the admin's repair", check)

    # ----- pools -----------------------------------------------------------------------------------

    def pool_move(self) -> bool:
        """A node never started yet relabelled into the other pool (its GPU product): it starts there."""
        started = {r.node for r in self.w.recorder.records if r.state in {s.value for s in IN_PROGRESS}}
        idle = [n for n in self.w.info.nodes if n not in started | self.moved
                and self.label(n) == State.UPGRADE_REQUIRED.value]
        if not idle:
            return False
        node = self.rng.choice(idle)
        product = ((self._meta(node)).get("labels") or {}).get(PRODUCT)
        other = next(p for p in PRODUCTS if p != product)
        self.moved.add(node)
        self.patch("admin", node, {"metadata": {"labels": {PRODUCT: other}}})
        return True

    def pool_budgets(self) -> bool:
        """The platform engineer's patch of the training pool's budgets (a merge patch replaces the list)."""
        pools = (self.w.rollout().get("spec") or {}).get("pools")
        if not pools or self.object_gone:
            return False
        parallel = self.rng.choice([1, 2, 3])
        with self.w.recorder.by_hand("platform engineer"):
            self.w.patch_spec({"pools": [{**TRAINING, "maxParallelUpgrades": parallel}]})
        self.figures.counts[f"training's maxParallelUpgrades set to {parallel}"] += 1
        return True

    # ----- the rollout object and its CRD gone ----------------------------------------------------

    def object_recreated(self) -> bool:
        return self._gone_and_back(crd=False)

    def crd_recreated(self) -> bool:
        return self._gone_and_back(crd=True)

    def _gone_and_back(self, crd: bool) -> bool:
        """A GitOps prune: the object (or its CRD, and the object with it) deleted, then applied again
        seconds later with the spec it had (its pause and acknowledgements too)."""
        obj = self.w.rollout()
        if self.object_gone or self.paused or self.standby is not None or not obj:
            return False
        spec = copy.deepcopy(obj.get("spec") or {})
        self.object_gone = True
        if crd:
            crds = self.w.cluster.type("customresourcedefinitions", "apiextensions.k8s.io")
            self.w.cluster.store.delete(crds, None, f"{PLURAL}.{GROUP}")
        else:
            self.w.cluster.store.delete(self.w.cluster.type(PLURAL, GROUP, VERSION), None, ROLLOUT)

        def back() -> None:
            if crd:
                create_rollout(self.w.cluster, spec)
            else:
                body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DriverRollout", "metadata": {"name": ROLLOUT},
                        "spec": spec}
                self.w.cluster.store.create(self.w.cluster.type(PLURAL, GROUP, VERSION), None, body)
            self.object_gone = False

        self.do_later(self.rng.uniform(2.0, 5.0), "the object applied again", back)
        return True

    # ----- taints ----------------------------------------------------------------------------------

    def foreign_taint(self) -> bool:
        """Someone else's taint under our key (another value; or another effect, lifted by its owner a
        while later, who checks it was still there): it must stay through the rollout."""
        free = [n for n in self.w.info.nodes if n not in self.planted]
        if not free:
            return False
        node = self.rng.choice(free)
        if self.rng.random() < 0.5:
            taint = {"key": TAINT_KEY, "value": FOREIGN_VALUE, "effect": "PreferNoSchedule"}
        else:
            taint = {"key": TAINT_KEY, "effect": "NoSchedule"}
        self.planted[node] = taint
        self._set_taints(node, [*self._taints(node), taint])
        if taint["effect"] == "NoSchedule":  # it keeps pods off the node: its owner lifts it soon
            def lift() -> None:
                if not self._carries(node, taint):
                    self.feature_problems.append(f"{node}: someone else's taint {taint} was removed")
                self._set_taints(node, [t for t in self._taints(node) if not _same(t, taint)])
                self.planted.pop(node, None)

            self.do_later(self.rng.uniform(3.0, 6.0), "the NoSchedule taint lifted", lift)
        return True

    def feature_violations(self) -> list[str]:
        """At the end: every taint of someone else's still on its node, and what went wrong on the way."""
        kept = [f"{n}: someone else's taint {t} was removed" for n, t in self.planted.items()
                if not self._carries(n, t)]
        return [*self.feature_problems, *kept]

    # ----- the cluster as kubectl shows it ---------------------------------------------------------

    def _meta(self, node: str) -> dict[str, Any]:
        return (self.w.cluster.get("nodes", node) or {}).get("metadata") or {}

    def _annotations(self, node: str) -> dict[str, str]:
        return self._meta(node).get("annotations") or {}

    def _taints(self, node: str) -> list[dict[str, Any]]:
        return list(((self.w.cluster.get("nodes", node) or {}).get("spec") or {}).get("taints") or [])

    def _carries(self, node: str, taint: dict[str, str]) -> bool:
        return any(_same(t, taint) for t in self._taints(node))

    def _set_taints(self, node: str, taints: list[dict[str, Any]]) -> None:
        with self.w.recorder.by_hand("admin"):
            self.w.cluster.store.patch(self.w.cluster.type("nodes"), None, node, MERGE, {"spec": {"taints": taints}})

    def _now(self) -> float:
        return time.monotonic()


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k, "") == b.get(k, "") for k in ("key", "value", "effect"))
