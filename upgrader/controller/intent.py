"""The DriverRollout object as the controller's source of intent (`upgrader run --rollout NAME`).

Each pass GETs the object. A spec generation not judged yet is judged as `run --policy` judges a
file (the schema, the preflight's files, the failure domains against the managed nodes): a valid one
takes effect in this pass; a refused one is `Valid=False` with the one-line reason, and the spec in
force stays (kept in `status.specInForce`, so a restarted controller keeps it too). With no valid
spec ever, nothing is started or written but the object's status. The pause and acknowledged failures
are read from spec at every pass. A pause an older upgrader left in its control ConfigMap is carried
over until `upgrader resume` (docs/operations.md#migrating-from-the-status-configmap).

The object (or its CRD) gone after a spec was in force is a state, not a silence
(docs/operations.md#the-rollout-object-deleted): said once in the log, the spec in force stays for the
nodes already in progress (they finish: uncordoned, untainted), nothing new starts (`missing_control`,
a pause that says why), and the metric `upgrader_rollout_object_missing` is 1. An object created again
under the same name is a new object (another uid): its spec is judged anew, and the old spec stays in
force until one is valid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from upgrader import __version__
from upgrader.controller.preflight_source import PreflightFiles, PreflightFlags, read_files
from upgrader.controller.settings import Settings
from upgrader.core.fleet.managed import fleet
from upgrader.core.model.views import Control, Snapshot
from upgrader.core.plan.policy_fit import fleet_problem
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.core.policy.rollout_object import (
    Intent,
    Verdict,
    Writer,
    object_name,
    object_status,
    policy_spec,
    read_intent,
    settled,
)
from upgrader.core.report.document import RolloutStatus, read_status
from upgrader.inputs import ConfigError
from upgrader.kube.api import KubeApi
from upgrader.kube.rollout_object import RolloutMissing, read_rollout, write_rollout_status
from upgrader.kube.snapshot import read_control

log = logging.getLogger("upgrader")
Obj = dict[str, Any]


class RolloutIntent:
    def __init__(self, api: KubeApi, name: str, settings: Settings, flags: PreflightFlags | None = None) -> None:
        self.api = api
        self.name = name
        self.settings = settings
        self.flags = flags
        self.obj: Obj = {}
        self.intent: Intent | None = None  # the newest generation, as judged
        self.in_force: int | None = None
        self.spec_in_force: dict[str, Any] | None = None
        self.problem: str | None = None
        self.legacy: Control | None = None  # a pause or acknowledgements the old ConfigMaps hold
        self.uid: str | None = None  # the object whose spec is in force
        self.missing: str | None = None  # why the object is not there, while it is not

    @property
    def label(self) -> str:
        return object_name(self.name)

    def read(self) -> Obj:
        """GET the object (RolloutMissing, ApiError as they come), and the ConfigMaps an older upgrader
        kept intent in: an older `upgrader pause` is honoured, not ignored in silence."""
        try:
            obj = read_rollout(self.api, self.name)
        except RolloutMissing as exc:
            self._gone(str(exc))
            raise
        if self.missing is not None:
            log.warning("%s is back: its spec is judged, and starts may resume", self.label)
            self.missing = None
        uid = (obj.get("metadata") or {}).get("uid")
        if self.uid is not None and uid != self.uid and self.in_force is not None:
            log.warning("%s was created again (uid %s): its spec is judged anew; the spec of the deleted object "
                        "stays in force until one is valid", self.label, uid)
            self.in_force = 0  # no generation of this object is in force yet: the next judge takes the newest
        self.uid = uid
        self.obj = obj
        self.legacy = read_control(self.api, self.settings)
        return self.obj

    def _gone(self, why: str) -> None:
        if why == self.missing:
            return
        self.missing = why
        if self.in_force is None:  # nothing to finish: said at start (commands/handlers.py) and by each pass's error
            return
        log.warning("%s; the spec in force (generation %s) stays for the nodes in progress, which finish; no node "
                    "starts until it is back (docs/operations.md#the-rollout-object-deleted)", why, self.in_force)

    def missing_control(self) -> Control:
        """The intent while the object is gone: the last one read, paused, saying why."""
        last = self.control()
        kept = f"{self.missing}; nodes in progress finish under the last spec, none starts"
        return Control(True, last.acknowledged, last.promoted, last.previous, kept)

    def starting_policy(self) -> tuple[Policy, PreflightFiles] | None:
        """At start, what the controller is built with: the spec the last controller kept in force
        (`status.specInForce`, in force at once), else the spec if it reads, else None. A newer spec
        is in force only once the first `judge` has checked it against the fleet too."""
        status = self.obj.get("status") or {}
        kept = status.get("specInForce")
        if isinstance(kept, Mapping):
            try:
                policy = policy_from_mapping(dict(kept))
                files = read_files(policy, self.flags)
            except (ValueError, ConfigError) as exc:
                log.warning("%s: the spec in force its status kept no longer reads: %s", self.label, exc)
            else:
                self.in_force = int(status.get("specInForceGeneration") or 0)
                self.spec_in_force = dict(kept)
                return policy, files
        intent = read_intent(self.name, self.obj)
        chosen = self._usable(intent)
        if chosen is None:
            self._refuse(intent, self.intent.problem if self.intent else intent.problem)
        return chosen

    def judge(self, snapshot: Snapshot, adopt: Callable[[Policy, PreflightFiles], None]) -> None:
        """A generation not in force: adopted (`adopt`: the controller acts on it from this pass) or refused."""
        intent = read_intent(self.name, self.obj)
        if intent.generation == self.in_force:
            self.intent = intent  # pause and acknowledgements are read every pass
            return
        # Not in force: judged again every pass while refused (the canary zone's nodes may come).
        chosen = self._usable(intent)
        if chosen is not None:
            problem = fleet_problem(chosen[0], fleet(snapshot).managed, snapshot)
            if problem is None:
                self._accept(intent)
                adopt(*chosen)
                log.info("%s: generation %d is in force", self.label, intent.generation)
                return
            self.intent = intent
            self._refuse(intent, f"{self.label}: spec.{problem}")
            return
        self._refuse(intent, self.intent.problem if self.intent else intent.problem)

    def _usable(self, intent: Intent) -> tuple[Policy, PreflightFiles] | None:
        self.intent = intent
        if intent.policy is None:
            return None
        try:
            return intent.policy, read_files(intent.policy, self.flags)
        except ConfigError as exc:
            problem = f"{self.label}: spec.{exc}"
            self.intent = Intent(intent.generation, None, problem, intent.paused, intent.acknowledged, intent.promoted)
            return None

    def _accept(self, intent: Intent) -> None:
        self.in_force, self.problem = intent.generation, None
        self.spec_in_force = policy_spec(self.obj.get("spec") or {})

    def _refuse(self, intent: Intent, problem: str | None) -> None:
        if problem != self.problem:
            in_force = (
                f"generation {self.in_force} stays in force" if self.in_force
                else "the spec of the object deleted before this one stays in force" if self.in_force == 0
                else "nothing is started"
            )
            log.warning("%s: generation %d refused: %s; %s", self.label, intent.generation, problem, in_force)
        self.problem = problem

    def verdict(self) -> Verdict:
        observed = self.intent.generation if self.intent else 0
        return Verdict(observed, self.in_force, self.problem)

    def control(self) -> Control:
        """The pass's intent: spec's pause and acknowledgements, with what the legacy ConfigMap carries over."""
        intent = self.intent or read_intent(self.name, self.obj)
        previous = read_status((self.obj.get("status") or {}).get("report"))
        legacy = self.legacy or Control()
        kept = None
        if legacy.paused and not intent.paused:
            # From the control ConfigMap; or, that one gone, from the pause the last status recorded.
            source = legacy.kept or f"configmap {self.settings.namespace}/{self.settings.control_configmap}"
            kept = f"carried over from {source} (upgrader resume ends it)"
        return Control(
            paused=intent.paused or legacy.paused,
            acknowledged={**legacy.acknowledged, **intent.acknowledged},
            promoted={**legacy.promoted, **intent.promoted},
            previous=previous,
            kept=kept,
        )

    def write(self, report: RolloutStatus | None, judged_at: str) -> bool:
        """The object's status from this pass's report (None: no spec was ever valid), written when it
        says something new."""
        writer = Writer(__version__, f"{self.settings.namespace}/{self.settings.lease_name}", self.settings.identity)
        current = self.obj.get("status") or {}
        status = object_status(report, self.verdict(), writer, current, self.spec_in_force, judged_at)
        if settled(status) == settled(current):
            return False
        self.obj = write_rollout_status(self.api, self.name, status)
        return True
