"""A rollout that stops at a maintenance window's end and resumes at the next opening, end to end: the
real controller (in-process, over the emulator's API without HTTP) on a virtual clock.

The fleet is the healthy scenario with 7 nodes (3, 2 and 2 in three zones), maxParallelUpgrades 1,
with the Ready delay of the driver pod and of the validators it brings back (the restart pauses them)
slowed to 12.5 s each so that one node takes 36 virtual seconds from start
to upgrade-done. The policy has one daily window of 2 minutes at 01:00 Europe/Berlin, which in January (CET, UTC+1) is
00:00 UTC: the virtual clock starts at 2026-01-01T00:00:00Z, the very opening of the first window.
So 4 nodes start in the first window (3 finish inside it; the 4th, the first of the second zone, is
in progress when it closes and finishes after), nothing starts for the rest of the day, and the last
3 start at the next opening, 2026-01-02T00:00:00Z, and finish inside that window. (7 nodes, not 6,
so that the node in progress at the close is not the last of its zone: while a zone's last node runs,
the status names the wait for that zone, which comes before the window's, as schedule.plan_starts
orders its waits.)

The window's times below are worked out by hand from the policy, not by upgrader.core.policy.windows: the
test checks the controller against them. Passes run every virtual second (the makespan harness,
`run_until_done`), idle ones skipped to the emulator's next timer. The window's opening and closing
are no timers of the emulator's, so the test sets no-op timers at each boundary and one second
before it, where the skipping stops: a pass sees each side of each boundary. The skipped passes
would have seen the same cluster under the same window verdict and done nothing, so the rollout is
the one a pass every second would make.
"""

from __future__ import annotations

import json
from typing import Any

from upgrader.controller.loop import Controller, PassReport
from upgrader.controller.settings import Settings
from upgrader.core.model.states import IN_PROGRESS, STATE_LABEL, State
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.kube.api import KubeApi
from upgrader.sim.apiserver.clock import VIRTUAL_EPOCH
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.controllers.settings import SimSettings
from upgrader.sim.fleets.builders import ZONES
from upgrader.sim.fleets.scenarios import ScenarioInfo, build
from upgrader.sim.proving.invariants import RolloutRecorder
from upgrader.sim.proving.makespan import run_until_done

NODES = 7
POLICY: dict[str, Any] = {
    "maxParallelUpgrades": 1,
    "maintenanceWindows": [
        {"name": "nightly", "schedule": "0 1 * * *", "duration": "2m", "timeZone": "Europe/Berlin"}
    ],
}
READY_DELAY = 12.5  # the new driver pod, then the validators it brings back, turn Ready after this: a node takes 36 s
NODE_SECONDS = 36.0

DAY = 86_400.0
OPEN_1 = VIRTUAL_EPOCH  # 2026-01-01T00:00:00Z = 01:00 CET, a Thursday
CLOSE_1 = OPEN_1 + 120  # 00:02Z
OPEN_2 = OPEN_1 + DAY  # 2026-01-02T00:00:00Z
CLOSE_2 = OPEN_2 + 120
ABOUT = "nightly (0 1 * * * Europe/Berlin, 2m)"
CLOSED = (
    f"no maintenance window is open: the next, {ABOUT}, opens at 2026-01-02T00:00:00Z "
    "(2026-01-02 01:00 CET); nodes in progress finish, none starts before"
)
# The status's `maintenance_window` inside the first window, between the two, inside the second.
OPEN_1_STATUS = {
    "open": True, "window": "nightly", "about": ABOUT, "closes_at": "2026-01-01T00:02:00Z", "next_open": None
}
CLOSED_STATUS = {
    "open": False, "window": "nightly", "about": ABOUT, "closes_at": None, "next_open": "2026-01-02T00:00:00Z"
}
OPEN_2_STATUS = {**OPEN_1_STATUS, "closes_at": "2026-01-02T00:02:00Z"}

STATUS_NS, STATUS_NAME = "gpu-operator", "gpu-driver-upgrade-status"
IN_PROGRESS_VALUES = {s.value for s in IN_PROGRESS}
LABEL_PATH = "/metadata/labels/" + STATE_LABEL.replace("~", "~0").replace("/", "~1")


class WindowRollout:
    """The emulator, the real controller and a recorder of every node change and of the status
    ConfigMap as it stood after each pass."""

    def __init__(self) -> None:
        self.cluster = EmulatedCluster.virtual(settings=SimSettings(pod_ready_delay=READY_DELAY))
        self.info: ScenarioInfo = build(self.cluster, "healthy", NODES)
        self.recorder = RolloutRecorder(self.cluster, status=(STATUS_NS, STATUS_NAME))
        self.policy: Policy = policy_from_mapping(POLICY)
        api = KubeApi(self.cluster.client(), sleep=lambda _: None)
        clock = self.cluster.store.clock
        self.controller = Controller(api, self.policy, Settings(identity="window-e2e"), clock.now)
        self.passes: list[tuple[float, dict[str, str], dict[str, Any]]] = []  # time, ConfigMap data, status.json

    def now(self) -> float:
        return float(self.cluster.store.clock.now())

    def on_pass(self, _: int, __: PassReport) -> None:
        cm = self.cluster.get("configmaps", STATUS_NAME, STATUS_NS) or {}
        data = dict(cm.get("data") or {})
        self.passes.append((self.now(), data, json.loads(data.get("status.json") or "{}")))

    def run(self) -> int:
        # A pass one second before and one at each boundary: idle passes are skipped up to these.
        for t in (CLOSE_1 - 1, CLOSE_1, OPEN_2 - 1, OPEN_2):
            self.cluster.store.timers.after(t - self.now(), "window test: a pass here", lambda: None)
        return run_until_done(
            self.cluster, self.controller, NODES, 1.0, CLOSE_2 - OPEN_1, on_pass=self.on_pass, skip_idle=True
        )

    def state_at(self, node: str, t: float) -> str | None:
        """`node`'s state label as committed at or before `t`."""
        state = None
        for r in self.recorder.records:
            if r.time > t:
                break
            if r.node == node:
                state = r.state
        return state

    def done_at(self, node: str) -> float:
        return next(r.time for r in self.recorder.records if r.node == node and r.state == State.DONE.value)

    def start_writes(self) -> list[tuple[float, str, int]]:
        """Every node write the emulator received that sets the state label to cordon-required (a
        start), refused ones included: (time, node, HTTP status)."""
        return [
            (req.time, req.name, req.status)
            for req in self.cluster.requests
            if req.resource == "nodes"
            and req.verb in ("patch", "update")
            and label_written(req.body) == State.CORDON_REQUIRED.value
        ]


def label_written(body: Any) -> str | None:
    """The state label value a node write sets: a JSON patch's add/replace (not its test of the value
    before), or a merge patch's or update's labels."""
    if isinstance(body, list):
        values = [op.get("value") for op in body if op.get("op") in ("add", "replace") and op.get("path") == LABEL_PATH]
        return values[-1] if values else None
    if isinstance(body, dict):
        return ((body.get("metadata") or {}).get("labels") or {}).get(STATE_LABEL)
    return None


def test_a_rollout_stops_at_the_windows_end_and_resumes_at_the_next_opening() -> None:
    w = WindowRollout()
    w.run()
    nodes = w.info.nodes
    starts = w.recorder.starts()
    start_of = {s.node: s.time for s in starts}
    first = [s for s in starts if OPEN_1 <= s.time < CLOSE_1]
    second = [s for s in starts if OPEN_2 <= s.time < CLOSE_2]

    # Every node started exactly once, each inside a window: 4 in the first (back to back, 36 s each,
    # the 4th at 108 s of 120), the other 3 in the second.
    assert sorted(start_of) == sorted(nodes) and len(starts) == NODES
    assert first + second == starts, [(s.node, s.time - OPEN_1) for s in starts]
    assert [s.time - OPEN_1 for s in first] == [0.0, NODE_SECONDS, 2 * NODE_SECONDS, 3 * NODE_SECONDS]
    assert [s.time - OPEN_2 for s in second] == [0.0, NODE_SECONDS, 2 * NODE_SECONDS]

    # (1) Nodes finish inside the first window.
    done_inside = [s.node for s in first if w.done_at(s.node) < CLOSE_1]
    assert done_inside == [s.node for s in first[:3]]

    # (2) The node in progress when the window closes goes on to upgrade-done, after the close and
    # without waiting for the next window; nothing leaves upgrade-required until the next opening.
    straddler = first[3].node
    assert w.state_at(straddler, CLOSE_1) in IN_PROGRESS_VALUES
    assert CLOSE_1 < w.done_at(straddler) == start_of[straddler] + NODE_SECONDS < OPEN_2
    waiting = [s.node for s in second]
    for node in waiting:
        assert w.state_at(node, CLOSE_1) == State.UPGRADE_REQUIRED.value
        assert w.state_at(node, OPEN_2 - 1) == State.UPGRADE_REQUIRED.value
    # The same from the API server's side: no write that starts a node (even one refused) was sent
    # between the close and the next opening.
    writes = w.start_writes()
    assert sorted(n for _, n, status in writes if status == 200) == sorted(nodes)
    assert [wr for wr in writes if CLOSE_1 <= wr[0] < OPEN_2] == []
    # Passes did run while the window was closed: at its close, while the straddler was still in
    # progress, after it finished, and right before the next opening.
    closed_passes = [p for p in w.passes if CLOSE_1 <= p[0] < OPEN_2]
    closed_times = [t for t, _, _ in closed_passes]
    assert closed_times[0] == CLOSE_1 and closed_times[-1] == OPEN_2 - 1
    assert any(t > w.done_at(straddler) for t in closed_times)
    assert CLOSE_1 - 1 in [t for t, _, _ in w.passes]

    # (3) Throughout, the status ConfigMap says the window is closed and when the next one opens.
    for t, data, status in closed_passes:
        at = f"at +{t - OPEN_1:g}s"
        assert (data["phase"], data["message"]) == ("Running", CLOSED), at
        assert status["waiting_on"]["reason"] == "maintenance-window", at
        assert status["waiting_on"]["until"] == "2026-01-02T00:00:00Z", at
        assert status["maintenance_window"] == CLOSED_STATUS, at
    for t, _, status in w.passes:
        if OPEN_1 <= t < CLOSE_1:
            assert status["maintenance_window"] == OPEN_1_STATUS, f"at +{t - OPEN_1:g}s"
    # One Event with the same words, on the node that starts next (once per change of wait).
    events = [
        e for e in w.cluster.store.objects(w.cluster.type("events"))
        if e.get("message") == f"rollout waiting: {CLOSED}"
    ]
    assert [e["involvedObject"]["name"] for e in events] == [waiting[0]]

    # (4) At the next opening nodes start again, and the rollout ends Done inside that window.
    assert min(s.time for s in second) == OPEN_2
    last_time, last_data, last_status = w.passes[-1]
    assert last_time < CLOSE_2
    assert last_data["phase"] == "Done"
    assert {k: v for k, v in last_status["nodes_by_state"].items() if v} == {State.DONE.value: NODES}
    assert last_status["maintenance_window"] == OPEN_2_STATUS
    for node in nodes:
        obj = w.cluster.get("nodes", node) or {}
        assert obj["metadata"]["labels"][STATE_LABEL] == State.DONE.value
        assert not obj["spec"].get("unschedulable"), f"{node} left cordoned"

    # (5) The rollout kept its promises: budgets, domain order (canary first), no cordon left behind,
    # no PDB bypassed; and the same by the stricter per-write audit.
    domain_of = {n: z for z, members in w.info.domains.items() for n in members}
    assert w.recorder.check(w.policy, domain_of, ZONES[0], list(ZONES)) == []
    audit = w.recorder.check_disturbed(w.policy, set(nodes))
    assert (audit.violations, audit.excused) == ([], [])
