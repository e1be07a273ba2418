"""An emulated cluster: store, behaviours, dispatcher, and (optionally) an HTTP server."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from upgrader.sim.apiserver.api import Dispatcher
from upgrader.sim.apiserver.backup import Backup
from upgrader.sim.apiserver.clock import Clock, RealClock, VirtualClock, rfc3339
from upgrader.sim.apiserver.faults import FaultPlan, RequestLog, RequestRecord
from upgrader.sim.apiserver.http import EmulatorHTTPServer
from upgrader.sim.apiserver.kubeconfig import write_kubeconfig
from upgrader.sim.apiserver.registry import BUILTIN_TYPES, ResourceType, crd_types
from upgrader.sim.apiserver.store import Store
from upgrader.sim.apiserver.watch import Change
from upgrader.sim.controllers.admission import GpuAdmission
from upgrader.sim.controllers.daemonsets import DaemonSetController
from upgrader.sim.controllers.disruption import DisruptionController
from upgrader.sim.controllers.jobs import JobController
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.controllers.workloads import WorkloadController
from upgrader.sim.loading import load
from upgrader.sim.resume import resume

Obj = dict[str, Any]


class EmulatedCluster:
    """Everything the emulator is, in one object; use `serve()` for HTTP, `client()` in-process."""

    def __init__(
        self,
        clock: Clock | None = None,
        settings: SimSettings | None = None,
        faults: FaultPlan | None = None,
        seed: int = 0,
        audit: IO[str] | None = None,
        enforce_rbac: bool = False,
    ) -> None:
        """`enforce_rbac`: authenticate bearer tokens and authorise requests by the stored RBAC objects
        (no token, or the kubeconfig's, is cluster-admin); see apiserver/rbac.py."""
        self.store = Store(clock or RealClock(), seed)
        self.settings = settings or SimSettings()
        self.disruption = DisruptionController(self.store)
        self.admission = GpuAdmission(self.store)
        self.daemonsets = DaemonSetController(self.store, self.settings)
        self.jobs = JobController(self.store, self.settings, self.admission)
        self.workloads = WorkloadController(self.store, self.settings)
        self.store.reactors.extend(
            [
                self.admission.react,  # first: a pod the kubelet rejects never runs, for any other reactor
                self.disruption.react,
                self.daemonsets.react,
                self.jobs.react,
                self.workloads.react,
                self._register_crds,
            ]
        )
        self.dispatcher = Dispatcher(self.store, faults, RequestLog(audit), enforce_rbac)
        self.server: EmulatorHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._wake = threading.Event()

    @classmethod
    def virtual(cls, **kwargs: Any) -> EmulatedCluster:
        return cls(clock=VirtualClock(), **kwargs)

    # ----- convenience ----------------------------------------------------------------------

    def type(self, plural: str, group: str = "", version: str = "v1") -> ResourceType:
        return self.store.type(group, version, plural)

    def get(
        self, plural: str, name: str, namespace: str | None = None, group: str = "", version: str = "v1"
    ) -> Obj | None:
        return self.store.find(self.type(plural, group, version), namespace, name)

    def create(
        self, plural: str, body: Obj, namespace: str | None = None, group: str = "", version: str = "v1"
    ) -> Obj:
        return self.store.create(self.type(plural, group, version), namespace, body)

    def load(self, objects: Iterable[Obj], bulk: bool = True) -> int:
        """Store many objects (apiVersion and kind set) and settle behaviours once; see `loading`."""
        return load(self, objects, bulk)

    def advance(self, seconds: float) -> None:
        self.store.advance(seconds)

    def backup(self) -> Backup:
        """Every object and the resourceVersion now (an etcd snapshot); see `restore_from`."""
        return self.store.backup()

    def restore_from(self, backup: Backup, bump_revision: int = 0, future_watches: str | None = None) -> None:
        """The API server comes back on `backup`'s data (an etcd restore): resourceVersions go back
        (unless `bump_revision`), every watch ends, a watch from a newer version gets what
        `future_watches` says ("wait", kube-apiserver's default, "gone" or "too-large"), and the
        behaviours carry on from the restored objects (`resume.resume`)."""
        with self.store.lock:
            self.store.restore_from(backup, bump_revision, future_watches)
            resume(self)

    @property
    def requests(self) -> list[RequestRecord]:
        return self.dispatcher.log.records()

    @property
    def faults(self) -> FaultPlan | None:
        return self.dispatcher.faults

    @faults.setter
    def faults(self, plan: FaultPlan | None) -> None:
        self.dispatcher.faults = plan

    def client(self) -> Any:
        """An official kubernetes ApiClient wired to this cluster without HTTP."""
        from upgrader.sim.apiserver.inprocess import in_process_client

        return in_process_client(self.dispatcher)

    def _register_crds(self, change: Change) -> None:
        if change.key != ("apiextensions.k8s.io", "customresourcedefinitions"):
            return
        if change.type != "DELETED":
            self.store.registry.serve_crd(change.new)
            if change.type == "ADDED":
                self._establish(change.new)
            return
        builtin = {t.key for t in BUILTIN_TYPES}
        emptied: set[tuple[str, str]] = set()
        for rtype in crd_types(change.new):
            if rtype.key in builtin:
                continue
            if rtype.key not in emptied:  # kube-apiserver deletes every object of a deleted CRD's kind with it
                emptied.add(rtype.key)
                for obj in self.store.objects(rtype):
                    self.store.delete(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            self.store.registry.remove(rtype.group, rtype.version, rtype.plural)

    def _establish(self, crd: Obj) -> None:
        """Its names accepted and its types served at once, as the conditions say
        (`kubectl wait --for=condition=Established crd/<name>`)."""
        stamp = rfc3339(self.store.clock.now())

        def conditions(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            status["acceptedNames"] = (obj.get("spec") or {}).get("names") or {}
            versions = (obj.get("spec") or {}).get("versions") or ()
            status["storedVersions"] = [v["name"] for v in versions if v.get("storage")]
            status["conditions"] = [
                {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": stamp}
                for kind, reason, message in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ]

        rtype = self.store.type("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        self.store.mutate(rtype, None, crd["metadata"]["name"], conditions)

    # ----- serving --------------------------------------------------------------------------

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start serving in background threads; returns the base URL."""
        self.server = EmulatorHTTPServer(self.dispatcher, host, port)
        # Polled every 50 ms rather than 0.5 s: stop() (every served test's teardown) waits for a poll.
        serving = threading.Thread(target=self.server.serve_forever, args=(0.05,), name="sim-http", daemon=True)
        serving.start()
        self._threads.append(serving)
        if not getattr(self.store.clock, "virtual", False):
            self.store.timers.on_schedule = self._wake.set
            ticking = threading.Thread(target=self._tick, name="sim-timers", daemon=True)
            ticking.start()
            self._threads.append(ticking)
        return self.server.url

    def _tick(self) -> None:
        """Fire timers as wall time reaches them."""
        assert self.server is not None
        while not self.server.stopping.is_set():
            with self.store.lock:
                due = self.store.timers.next_due()
            wait = 0.5 if due is None else max(0.0, min(0.5, due - self.store.clock.now()))
            self._wake.wait(wait)
            self._wake.clear()
            self.store.run_due()

    def write_kubeconfig(self, path: str | Path) -> Path:
        if self.server is None:
            raise RuntimeError("serve() first")
        return write_kubeconfig(path, self.server.url)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stopping.set()
            self._wake.set()
            self.server.shutdown()
            self.server.server_close()
            for thread in self._threads:
                thread.join(timeout=5)
            self.server = None
            self._threads.clear()

    def __enter__(self) -> EmulatedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
