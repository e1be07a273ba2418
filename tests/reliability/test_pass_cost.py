"""What a reconcile pass costs in requests: the same at any fleet size, plus at most 2 per node in progress;
under gpuCapacity.onInsufficient: wait, no more while no start can be judged, and one LIST of every pod when one is.

CI-sized (30 vs 300 nodes, ~30 pods each), in process on a virtual clock that never moves, counted
from the emulator's request log; once with every pass listing, once with the watch-fed cache.
bench/pass_requests.py measures the same rule, and CPU time, over HTTP at 100, 1,000 and 5,000 nodes.
"""

from __future__ import annotations

import gc
from collections import Counter

import pytest

from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings
from upgrader.core.model.actions import Transition
from upgrader.core.model.states import STATE_LABEL
from upgrader.core.policy.policy import OnInsufficientCapacity, Policy, policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.kube.cache import ClusterCache
from upgrader.sim.apiserver.faults import RequestRecord
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.largefleet import paused_rollout

SIZES = (30, 300)
IN_PROGRESS = 4
READS = ("get", "list")


class Fleet:
    """A generated fleet (every node upgrade-required, rollout paused) and a controller on it;
    `cached`: with the watch-fed cache, caught up before each pass (its own requests not counted)."""

    def __init__(self, nodes: int, cached: bool = False, policy: Policy | None = None) -> None:
        self.cluster = EmulatedCluster.virtual()
        self.cluster.load(paused_rollout(nodes))
        api = KubeApi(self.cluster.client(), sleep=lambda _: None)
        settings = Settings(identity="pass-cost")
        self.controller = Controller(api, policy or Policy(), settings, self.cluster.store.clock.now)
        if cached:
            watch_api = KubeApi(self.cluster.client(), sleep=lambda _: None)
            room = self.controller.policy.gpu_capacity.on_insufficient is OnInsufficientCapacity.WAIT
            self.controller.cache = ClusterCache(watch_api, self.controller.settings, lambda: None, room=room)
        self.run_pass()  # the first pass writes the rollout status; later ones only read while idle

    def catch_up(self) -> None:
        """The watch-fed copies, if any, take in what the cluster holds now."""
        cache = self.controller.cache
        if cache is not None:
            for informer in (cache.nodes, cache.driver_pods, cache.pdbs, cache.gpu_pods):
                if informer is not None:
                    informer.step()

    def run_pass(self) -> list[RequestRecord]:
        self.catch_up()
        before = len(self.cluster.requests)
        report = self.controller.reconcile()
        assert report.error is None and report.status.phase == "Paused"
        return self.cluster.requests[before:]

    def put_in_progress(self, count: int, state: str = "pod-deletion-required") -> None:
        for i in range(count):
            self.cluster.store.mutate(
                self.cluster.type("nodes"),
                None,
                f"gpu-{i:05d}",
                lambda node: node["metadata"]["labels"].__setitem__(STATE_LABEL, state),
            )


def verbs(records: list[RequestRecord]) -> Counter[str]:
    return Counter(r.verb for r in records)


def reads(records: list[RequestRecord]) -> int:
    return sum(1 for r in records if r.verb in READS)


@pytest.fixture(scope="module", params=[False, True], ids=["lists", "cached"])
def fleets(request: pytest.FixtureRequest) -> dict[int, Fleet]:
    return {n: Fleet(n, cached=request.param) for n in SIZES}


def test_an_idle_pass_sends_the_same_requests_at_every_size(fleets: dict[int, Fleet]) -> None:
    passes = {n: [fleets[n].run_pass() for _ in range(3)] for n in SIZES}
    shapes = {n: [sorted((r.verb, r.path, r.query) for r in p) for p in passes[n]] for n in SIZES}
    # the same requests, to the same paths, in every pass at both sizes: a few LISTs and GETs
    assert shapes[30][0] == shapes[30][1] == shapes[30][2] == shapes[300][0] == shapes[300][2]
    first = passes[30][0]
    assert reads(first) == len(first) <= 8
    # 5 LISTs (nodes, driver DaemonSets, revisions, driver pods, PDBs); from the cache, 2
    cached = fleets[30].controller.cache is not None
    assert verbs(first)["list"] == (2 if cached else 5)
    listed = {r.path for r in first if r.verb == "list"}
    assert ("/api/v1/nodes" in listed) is not cached
    assert ("/apis/policy/v1/poddisruptionbudgets" in listed) is not cached


@pytest.mark.parametrize("nodes", SIZES)
def test_each_node_in_progress_adds_at_most_two_requests(fleets: dict[int, Fleet], nodes: int) -> None:
    fleet = fleets[nodes]
    idle = fleet.run_pass()
    fleet.put_in_progress(IN_PROGRESS)
    acting = fleet.run_pass()
    # the pass that acts reads one more list per node (the node's pods) and evicts its GPU pods
    assert reads(acting) == reads(idle) + IN_PROGRESS
    assert verbs(acting)["create"] >= IN_PROGRESS  # evictions (4 GPU pods a node)
    later = [fleet.run_pass() for _ in range(4)]
    for records in later:  # waiting for the evicted pods to terminate
        assert reads(records) == reads(idle) + IN_PROGRESS
        assert len(records) <= len(idle) + 2 * IN_PROGRESS
    # steady: the same every pass once the status says what the nodes wait for
    assert len(later[-1]) == len(later[-2])


WAIT = policy_from_mapping({"gpuCapacity": {"onInsufficient": "wait"}})


def every_pod_listed(records: list[RequestRecord]) -> int:
    return sum(1 for r in records if r.verb == "list" and r.path == "/api/v1/pods" and "fieldSelector" not in r.query)


def test_under_capacity_wait_a_pass_that_can_start_nothing_sends_no_more_requests() -> None:
    """Paused: no start to judge, so not the LIST of every pod that judging one would need."""
    default, waiting = Fleet(30), Fleet(30, policy=WAIT)
    shapes = [sorted((r.verb, r.path, r.query) for r in f.run_pass()) for f in (default, waiting)]
    assert shapes[0] == shapes[1]


def test_under_capacity_wait_the_first_start_judged_lists_every_pod_once() -> None:
    fleet = Fleet(30, policy=WAIT)
    fleet.cluster.store.delete(fleet.cluster.type("configmaps"), "gpu-operator", "gpu-driver-upgrade-status")
    before = len(fleet.cluster.requests)
    report = fleet.controller.reconcile()  # no longer paused: it judges starts against the room
    assert report.error is None and report.status.phase == "Running"
    assert every_pod_listed(fleet.cluster.requests[before:]) == 1


def test_under_capacity_wait_with_the_copy_no_pass_lists_every_pod_and_the_starts_are_the_same() -> None:
    """`upgrader run` keeps the fleet's GPU pods in a watch-fed copy (kube/room_copy.py): judging
    starts against the room reads it, not a LIST of every pod, and starts exactly what the LIST did."""
    listed: dict[bool, int] = {}
    started: dict[bool, list[tuple[str, str]]] = {}
    for cached in (False, True):
        fleet = Fleet(30, cached=cached, policy=WAIT)
        fleet.cluster.store.delete(fleet.cluster.type("configmaps"), "gpu-operator", "gpu-driver-upgrade-status")
        cache = fleet.controller.cache
        if cache is not None and cache.gpu_pods is not None:
            cache.gpu_pods.step()
        before = len(fleet.cluster.requests)
        report = fleet.controller.reconcile()
        assert report.error is None and report.status.phase == "Running"
        listed[cached] = every_pod_listed(fleet.cluster.requests[before:])
        moves = [o.action for o in report.outcomes if o.ok and isinstance(o.action, Transition)]
        started[cached] = sorted((a.node, a.target.value) for a in moves)
    assert listed == {False: 1, True: 0}
    assert started[True] == started[False] and started[False], "the same nodes started, and some did"


def test_upgrader_run_freezes_the_heap_once_every_copy_has_listed() -> None:
    """`upgrader run` takes the copies' views out of the cyclic collector's sight once they have
    listed (controller/loop.freeze_heap): a full collection traced them all, 300 ms at 15,000 nodes."""
    cluster = EmulatedCluster.virtual()
    cluster.load(paused_rollout(30))
    controller = Controller(
        KubeApi(cluster.client(), sleep=lambda _: None), Policy(), Settings(identity="freeze"), cluster.store.clock.now
    )
    cache = ClusterCache(KubeApi(cluster.client(), sleep=lambda _: None), controller.settings, lambda: None)
    controller.cache, controller.freeze_heap = cache, True
    frozen = gc.get_freeze_count()
    try:
        assert controller.reconcile().error is None
        assert gc.get_freeze_count() == frozen and controller.freeze_heap, "the copies have not listed yet"
        for informer in (cache.nodes, cache.driver_pods, cache.pdbs):
            informer.step()
        assert controller.reconcile().error is None
        assert gc.get_freeze_count() > frozen and not controller.freeze_heap, "frozen, and only once"
    finally:
        gc.unfreeze()
