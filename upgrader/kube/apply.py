"""Act: apply decided actions to the cluster, one guarded write each, and report what came of it.

Label writes are compare-and-swap: a JSON patch `test`s the state label's current value before
replacing it, so a concurrent relabel (an operator's retry, a second replica) makes the write fail
instead of being overwritten. Annotation ops are built against the latest copy of the node we
hold, which each successful write refreshes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from upgrader.core.model.actions import (
    Action,
    Annotate,
    DeletePod,
    Event,
    Evict,
    Outcome,
    Result,
    SetLabels,
    SetTaints,
    SetUnschedulable,
    Transition,
    WriteStatus,
)
from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.report.document import RolloutStatus, to_dict
from upgrader.kube.addresses import Addresses
from upgrader.kube.api import JSON_PATCH, MERGE, ApiError, KubeApi
from upgrader.kube.events import EventRecorder
from upgrader.kube.snapshot import status_path

Obj = dict[str, Any]


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class Applier:
    def __init__(
        self,
        api: KubeApi,
        settings: Addresses,
        nodes: dict[str, Obj],
        now: float,
        observe: Callable[[Obj], None] | None = None,
        events: EventRecorder | None = None,
        status_configmap: bool = True,
    ) -> None:
        self.api = api
        # False under a rollout object: the pass's status goes on the object (controller/intent.py).
        self.status_configmap = status_configmap
        self.settings = settings
        self.nodes = nodes  # latest node objects we hold
        self.now = now
        self.observe = observe or (lambda _: None)  # told every node and pod our writes got back
        self.events = events or EventRecorder(api, settings)

    def apply(self, actions: Iterable[Action]) -> list[Outcome]:
        return [self.apply_one(a) for a in actions]

    def apply_one(self, action: Action) -> Outcome:
        try:
            result = self._dispatch(action)
            return Outcome(action, result)
        except ApiError as exc:
            return Outcome(action, self._classify(action, exc), exc.message)

    @staticmethod
    def _classify(action: Action, exc: ApiError) -> Result:
        if isinstance(action, Evict) and exc.pdb_refusal:
            return Result.BLOCKED
        if exc.status == 404 and isinstance(action, Evict | DeletePod):
            return Result.GONE
        if exc.status == 409 and isinstance(action, Evict | DeletePod):
            return Result.GONE  # the uid precondition failed: that pod is already replaced
        if exc.status in (409, 422):
            return Result.CONFLICT
        return Result.ERROR

    def _dispatch(self, action: Action) -> Result:
        if isinstance(action, Transition):
            self._transition(action)
        elif isinstance(action, Annotate):
            self._patch_node(action.node, self._annotation_ops(action.node, action.annotations), JSON_PATCH)
        elif isinstance(action, SetUnschedulable):
            self._patch_node(action.node, self._cordon_patch(action), MERGE)
        elif isinstance(action, SetLabels):
            self._patch_node(action.node, self._labels_ops(action), JSON_PATCH)
        elif isinstance(action, SetTaints):
            self._patch_node(action.node, self._taints_patch(action), MERGE)
        elif isinstance(action, Evict):
            self.api.evict(action.namespace, action.name, action.uid)
        elif isinstance(action, DeletePod):
            deleted = self.api.delete(
                f"/api/v1/namespaces/{action.namespace}/pods/{action.name}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": action.uid}},
            )
            self.observe(deleted)  # the pod, terminating (or a Status once gone)
        elif isinstance(action, Event):
            self._event(action)
        elif isinstance(action, WriteStatus):
            self._status(action)
        return Result.OK

    # ----- nodes ------------------------------------------------------------------------------------

    def _patch_node(self, name: str, patch: Any, content_type: str) -> None:
        if content_type == JSON_PATCH and not patch:
            return
        self.nodes[name] = self.api.patch(f"/api/v1/nodes/{name}", patch, content_type)
        self.observe(self.nodes[name])

    def _cordon_patch(self, action: SetUnschedulable) -> Obj:
        """A cordon or uncordon guarded by the resourceVersion it was decided on: if anyone changed the
        node since (an admin's cordon the copy had not seen), the API server refuses it (409) and the
        next pass decides again on a fresh read, instead of undoing the other write."""
        patch: Obj = {"spec": {"unschedulable": action.unschedulable or None}}
        version = (self.nodes.get(action.node, {}).get("metadata") or {}).get("resourceVersion")
        if version:
            patch["metadata"] = {"resourceVersion": version}
        if action.record:  # a merge patch: None removes the key
            patch.setdefault("metadata", {})["annotations"] = dict(action.record)
        return patch

    def _labels_ops(self, action: SetLabels) -> list[Obj]:
        """A JSON patch: each label tested at the value the decision read, then set or removed, and the
        record beside it; a label that changed meanwhile fails the test (422), and nothing is written."""
        labels = (self.nodes.get(action.node, {}).get("metadata") or {}).get("labels") or {}
        ops: list[Obj] = [
            {"op": "test", "path": f"/metadata/labels/{_pointer(k)}", "value": v} for k, v in action.expected.items()
        ]
        for key, value in action.labels.items():
            path = f"/metadata/labels/{_pointer(key)}"
            if value is None:
                if key in labels:
                    ops.append({"op": "remove", "path": path})
            else:
                ops.append({"op": "add", "path": path, "value": value})
        return ops + self._annotation_ops(action.node, action.record)

    def _taints_patch(self, action: SetTaints) -> Obj:
        """The node's whole taint list (a merge patch replaces a list), guarded like a cordon: a taint
        someone else changed meanwhile is a 409, and the next pass decides on a fresh read."""
        taints = [{"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})} for t in action.taints]
        patch: Obj = {"spec": {"taints": taints or None}}
        version = (self.nodes.get(action.node, {}).get("metadata") or {}).get("resourceVersion")
        if version:
            patch["metadata"] = {"resourceVersion": version}
        return patch

    def _annotation_ops(self, name: str, annotations: dict[str, str | None] | Any) -> list[Obj]:
        current = (self.nodes.get(name, {}).get("metadata") or {}).get("annotations")
        ops: list[Obj] = []
        if current is None:
            wanted = {k: v for k, v in annotations.items() if v is not None}
            if wanted:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": wanted})
            return ops
        for key, value in annotations.items():
            path = f"/metadata/annotations/{_pointer(key)}"
            if value is None:
                if key in current:
                    ops.append({"op": "remove", "path": path})
            elif current.get(key) != value:
                ops.append({"op": "add", "path": path, "value": value})
        return ops

    def _transition(self, action: Transition) -> None:
        label = f"/metadata/labels/{_pointer(STATE_LABEL)}"
        node = self.nodes.get(action.node, {})
        labels = (node.get("metadata") or {}).get("labels")
        if action.source is None:
            # Adoption of an unlabelled node: guarded by the resourceVersion we read it at.
            patch = {
                "metadata": {
                    "resourceVersion": node.get("metadata", {}).get("resourceVersion"),
                    "labels": {STATE_LABEL: action.target.value},
                    "annotations": dict(action.annotations),
                }
            }
            self._patch_node(action.node, patch, MERGE)
            return
        ops: list[Obj] = [{"op": "test", "path": label, "value": action.source.value}]
        version = (node.get("metadata") or {}).get("resourceVersion")
        if action.source is State.UPGRADE_REQUIRED and version:
            # Starting records whether someone else had cordoned the node: decided on a copy that
            # lags (a cordon not seen yet), it must fail and be decided again, or we would later
            # uncordon a node an admin cordoned.
            ops.insert(0, {"op": "test", "path": "/metadata/resourceVersion", "value": version})
        ops.append({"op": "replace" if labels else "add", "path": label, "value": action.target.value})
        ops.extend(self._annotation_ops(action.node, action.annotations))
        self._patch_node(action.node, ops, JSON_PATCH)

    # ----- events and status ------------------------------------------------------------------------

    def _event(self, action: Event) -> None:
        node_uid = (self.nodes.get(action.node, {}).get("metadata") or {}).get("uid", "")
        self.events.record(action, node_uid, self.now)

    def _status(self, action: WriteStatus) -> None:
        if self.status_configmap:
            write_status(self.api, self.settings, action.status)


def write_status(api: KubeApi, settings: Addresses, status: RolloutStatus) -> None:
    """Merge the status into the ConfigMap (creating it), leaving the operators' keys alone."""
    data = {
        "phase": status.phase.value,
        "message": status.message,
        "status.json": json.dumps(to_dict(status), sort_keys=True),
    }
    patch_configmap(api, settings, data)


def patch_configmap(api: KubeApi, settings: Addresses, data: dict[str, str]) -> None:
    path = status_path(settings)
    try:
        api.patch(path, {"data": data})
    except ApiError as exc:
        if exc.status != 404:
            raise
        api.create(
            f"/api/v1/namespaces/{settings.namespace}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": settings.status_configmap,
                    "namespace": settings.namespace,
                    "labels": {"app.kubernetes.io/name": "upgrader"},
                },
                "data": data,
            },
        )
