"""The cluster's other actors in the modelled world: the clock, the kubelet, the DaemonSet, Job and
ReplicaSet controllers, the scheduler, and people (cordons, labels, budgets, driver releases, pause).
"""

from __future__ import annotations

from upgrader.core.model.states import (
    FAILED_AT,
    IN_PROGRESS,
    REQUESTED_ANNOTATION,
    SKIP_LABEL,
    STATE_LABEL,
    WAS_UNSCHEDULABLE,
    State,
)
from upgrader.core.model.views import HASH_LABEL

from .world_apiserver import WorldApiServer
from .world_objects import (
    DRIVER,
    GPU_DAEMON,
    JOB,
    JOB_APP,
    NEWER_HASH,
    NS,
    OLD_HASH,
    TWEAK_HASH,
    WORKLOAD,
    Workload,
    WPod,
)


class WorldActors(WorldApiServer):
    """What everyone but upgrader does to the world (the state machine's rules call these)."""

    # ----- the cluster's other actors (the state machine's rules) -----------------------------------

    def advance(self, seconds: int) -> None:
        self.now += seconds

    def terminating(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.terminating]

    def disappear(self, uid: str) -> None:
        """The kubelet finished a graceful deletion: the pod is gone."""
        self.pods.pop(uid)
        self.seq += 1

    def nodes_missing_driver(self) -> list[str]:
        """GPU nodes where the OnDelete DaemonSet would create a driver pod (none live there)."""
        return [n.name for n in self.nodes.values() if n.gpu and not any(p.active for p in self.driver_pods_on(n.name))]

    def create_driver(self, node: str) -> WPod:
        """The DaemonSet controller creates the node's driver pod at the newest revision."""
        return self._driver_pod(node, self.newest)

    def starting_drivers(self) -> list[WPod]:
        """Driver pods not Ready that could turn Ready (their image pulls)."""
        return [
            p
            for p in self.pods.values()
            if p.kind == DRIVER
            and p.active
            and not p.ready
            and not (p.labels.get(HASH_LABEL) != OLD_HASH and self.nodes[p.node].image_broken)
        ]

    def driver_ready(self, uid: str) -> None:
        pod = self.pods[uid]
        pod.ready, pod.waiting_reason = True, None
        self._reload(self.nodes[pod.node], pod.labels[HASH_LABEL])
        self.seq += 1

    def running_or_failing_drivers(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == DRIVER and p.active]

    def running_drivers(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == DRIVER and p.active and p.ready]

    def driver_crash(self, uid: str) -> None:
        pod = self.pods[uid]
        pod.ready, pod.waiting_reason = False, "CrashLoopBackOff"
        self._driver_down(pod.node)
        self.seq += 1

    def running_jobs(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == JOB and p.active]

    def finish_job(self, uid: str) -> None:
        pod = self.pods[uid]
        pod.phase, pod.ready = "Succeeded", False
        self.seq += 1

    def schedulable(self, gpus: int) -> list[str]:
        """Nodes the scheduler may place a new pod on."""
        return [
            n.name
            for n in self.nodes.values()
            if not n.unschedulable and n.ready and (gpus == 0 or (n.gpu_allocatable or "0") != "0")
        ]

    def start_job(self, node: str, gpus: int) -> WPod:
        return self._add(
            WPod(
                NS,
                f"job-{next(self._names)}",
                self._uid(),
                node,
                JOB,
                {"app": JOB_APP},
                gpus=gpus,
                owner_kind="Job",
                owner_name="batch",
            )
        )

    def placements(self, workload: Workload) -> list[str]:
        """Where the ReplicaSet's next replica can go, when it is short of replicas."""
        mine = [p for p in self.pods.values() if p.kind == WORKLOAD and p.owner_name == workload.name]
        if sum(1 for p in mine if p.active) >= workload.replicas:
            return []
        taken = {p.node for p in mine if not p.terminal} if workload.anti_affinity else set()
        return [n for n in self.schedulable(workload.gpus) if n not in taken]

    def reschedule(self, workload: str, node: str, ready: bool) -> WPod:
        return self._workload_pod(self.workloads[workload], node, ready)

    def unready_pods(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == WORKLOAD and p.active and not p.ready]

    def pod_ready(self, uid: str) -> None:
        self.pods[uid].ready = True
        self.seq += 1

    def cordon_by_other(self, node: str) -> None:
        """`kubectl cordon` by someone else; on an unschedulable node it changes nothing."""
        n = self.nodes[node]
        if n.unschedulable:
            return
        self.seq += 1
        n.unschedulable, n.foreign_cordon, n.foreign_cordon_seq = True, True, self.seq
        n.resource_version += 1

    def uncordon_by_other(self, node: str) -> None:
        """`kubectl uncordon` by someone else, whoever's cordon it was."""
        n = self.nodes[node]
        if not n.unschedulable:
            return
        self.seq += 1
        n.unschedulable, n.foreign_cordon, n.uncordoned_by_other = False, False, True
        n.resource_version += 1

    def hand_set_label(self, node: str, value: str) -> None:
        """`kubectl label --overwrite` of the state label to any value, a bogus one included: the
        nodes in progress are no longer what upgrader made them."""
        n = self.nodes[node]
        if n.labels.get(STATE_LABEL) == value:
            return  # the value it already has: kubectl changes nothing, and the state's clock runs on
        n.labels[STATE_LABEL] = value
        n.label_since, n.hand_edited = self.now, True
        n.adopted = n.adopted or n.state in IN_PROGRESS or n.state is State.FAILED
        n.resource_version += 1
        self.seq += 1
        self.fleet_seq = self.seq

    def drop_annotation(self, node: str, key: str) -> None:
        """`kubectl annotate <node> <key>-`: one of upgrader's records is gone."""
        n = self.nodes[node]
        if n.annotations.pop(key, None) is not None:
            n.hand_edited = True
            n.record_lost = n.record_lost or key == WAS_UNSCHEDULABLE
            n.resource_version += 1
            self.seq += 1

    def relabel(self, node: str, state: State) -> None:
        """An operator's `kubectl label --overwrite` of the state label (annotations untouched)."""
        n = self.nodes[node]
        n.labels[STATE_LABEL] = state.value
        n.label_since = self.now
        n.resource_version += 1
        self.seq += 1

    def fix_image(self, node: str) -> None:
        self.nodes[node].image_broken = False
        for pod in self.driver_pods_on(node):
            if pod.waiting_reason == "ImagePullBackOff":
                pod.waiting_reason = "ContainerCreating"

    def gpu_daemon_pods(self) -> list[WPod]:
        return [p for p in self.pods.values() if p.kind == GPU_DAEMON and p.active]

    def remove_gpu_daemon(self, uid: str) -> None:
        """Someone takes the GPU-holding DaemonSet off the node (its pod is deleted, gracefully)."""
        self.pods[uid].terminating = True
        self.seq += 1

    def new_driver_revision(self) -> None:
        """`kubectl apply` of a newer driver: the DaemonSet's newest ControllerRevision changes (OnDelete:
        no pod changes by itself)."""
        if NEWER_HASH not in self.revisions:
            self.revisions.append(NEWER_HASH)
            self.seq += 1

    def tweak_driver_template(self) -> None:
        """A label or toleration of the driver template changes (at most once): a new revision with
        the same DRIVER_CONFIG_DIGEST, which the GPU Operator upgrades by restarting the driver only."""
        if TWEAK_HASH not in self.revisions:
            self.versions[TWEAK_HASH] = self.versions[self.newest]
            self.digests[TWEAK_HASH] = self.digests[self.newest]
            self.revisions.append(TWEAK_HASH)
            self.seq += 1

    def delete_driver_pod(self, uid: str) -> None:
        """`kubectl delete pod` of a driver pod (the runbook's fix for a failed node)."""
        pod = self.pods[uid]
        if pod.active:
            self._terminate(pod)
            self.seq += 1

    def set_skip(self, node: str, skip: bool) -> None:
        labels = self.nodes[node].labels
        if skip:
            labels[SKIP_LABEL] = "true"
        else:
            labels.pop(SKIP_LABEL, None)
        self.seq += 1
        self.fleet_seq = self.seq

    def request_upgrade(self, node: str) -> None:
        self.nodes[node].annotations[REQUESTED_ANNOTATION] = "true"
        self.seq += 1

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        """`upgrader resume`: unpause only (failures stay unacknowledged)."""
        self.paused = False

    def acknowledge(self) -> None:
        """`upgrader acknowledge --all`: every failure the controller recorded, named by its failed-at."""
        for node in self.nodes.values():
            recorded = node.annotations.get(FAILED_AT)
            if node.state is State.FAILED and recorded:
                self.acknowledged[node.name] = recorded
