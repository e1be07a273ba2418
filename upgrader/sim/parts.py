"""The parts of an emulated cluster that loading and resuming work on: its store and controllers.

`EmulatedCluster` (cluster.py) has them; loading.py and resume.py name only this shape, so the
cluster imports them and not the other way round.
"""

from __future__ import annotations

from typing import Protocol

from upgrader.sim.apiserver.store import Store
from upgrader.sim.controllers.daemonsets import DaemonSetController
from upgrader.sim.controllers.disruption import DisruptionController
from upgrader.sim.controllers.jobs import JobController
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.controllers.workloads import WorkloadController


class ClusterParts(Protocol):
    store: Store
    settings: SimSettings
    daemonsets: DaemonSetController
    jobs: JobController
    workloads: WorkloadController
    disruption: DisruptionController
