"""Alert gating: the matching rule, the policy's one-line errors, and whole passes in which no node
starts while a matching alert fires (or Prometheus cannot say), a node in progress finishes, and the
next starts once the alert resolves. Clock: epoch seconds from T0 (2023-11-14T22:13:20Z)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from upgrader.controller.settings import load_policy
from upgrader.core.model.actions import Event
from upgrader.core.model.alerts import Alert, AlertReading
from upgrader.core.model.states import SINCE_STATE, STATE_LABEL, State
from upgrader.core.model.views import Control
from upgrader.core.policy.alert_gate import AlertGate, gate_verdict
from upgrader.core.report.entries import GateReport
from upgrader.core.rollout.reconcile import PassOutcome, reconcile
from upgrader.inputs import ConfigError

from .factories import NEW, OLD, T0, at, driver_pod, gpu_pod, node, policy, snapshot, validator
from .test_rollout import World

S = State
URL = "http://prometheus.monitoring:9090"
GATE: dict[str, Any] = {
    "prometheusURL": URL + "/",
    "alerts": ["GPUServingSLOBurn"],
    "matchers": [{"label": "severity", "regex": "critical|page"}, {"label": "team", "regex": "gpu-.*"}],
}
BURN = Alert("GPUServingSLOBurn", {"severity": "warning", "namespace": "serve", "pod": "p-1"}, at(-600))
DISK = Alert("NodeDiskFull", {"severity": "critical", "team": "gpu-infra", "instance": "n7"}, at(-60))


def gate(**data: Any) -> AlertGate:
    return AlertGate.model_validate({**GATE, **data})


@pytest.mark.parametrize(
    ("alert", "matches"),
    [
        (BURN, True),  # listed by name, whatever its labels
        (DISK, True),  # every matcher fully matches
        (Alert("NodeDiskFull", {"severity": "critical", "team": "storage"}), False),  # one matcher fails
        (Alert("NodeDiskFull", {"severity": "critical-ish", "team": "gpu-infra"}), False),  # anchored
        (Alert("NodeDiskFull", {"severity": "page"}), False),  # a missing label reads as ""
        (Alert("gpuservingsloburn", {}), False),  # names are compared exactly
    ],
)
def test_the_matching_rule_name_listed_or_every_matcher(alert: Alert, matches: bool) -> None:
    assert gate().matches(alert) is matches


def test_matchers_see_alertname_and_names_alone_gate_on_names() -> None:
    every = gate(alerts=[], matchers=[{"label": "alertname", "regex": ".+"}])
    assert every.matches(DISK) and every.matches(BURN)
    names_only = gate(matchers=[])
    assert names_only.matches(BURN) and not names_only.matches(DISK)
    assert gate().prometheus_url == URL and gate().timeout_seconds == 5


def test_the_verdict_names_matching_alerts_with_key_labels_since_when() -> None:
    noise = Alert("Watchdog", {"severity": "none"}, at(-9000))
    verdict = gate_verdict(gate(), AlertReading((DISK, noise, BURN)))
    assert (verdict.open, verdict.reason, verdict.url) == (False, "alert-firing", URL)
    assert verdict.alerts == (
        'GPUServingSLOBurn{severity="warning", namespace="serve"} since 2023-11-14T22:03:20Z',
        'NodeDiskFull{severity="critical", team="gpu-infra"} since 2023-11-14T22:12:20Z',
    )
    assert gate_verdict(gate(), AlertReading((noise,))).open
    assert gate_verdict(None, None).open and gate_verdict(None, AlertReading(error="x")).open  # no gate
    unasked = gate_verdict(gate(), None)  # a gate nobody asked Prometheus for fails closed too
    assert (unasked.open, unasked.reason, unasked.error) == (False, "alert-gate-unavailable", "not asked this pass")


A = "alertGate:\n  prometheusURL: http://p:9090\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (A, "alertGate: needs alerts (names) or matchers; to gate on every firing alert, use "
            "matchers: [{label: alertname, regex: '.+'}]"),
        ("alertGate:\n  alerts: [X]\n", "alertGate.prometheusURL: Field required"),
        ("alertGate:\n  prometheusURL: prometheus:9090\n  alerts: [X]\n",
         "alertGate.prometheusURL: must be an http(s) URL like http://prometheus.monitoring:9090, "
         "got 'prometheus:9090'"),
        ("alertGate:\n  prometheusURL: http://p:9090/?x=1\n  alerts: [X]\n",
         "alertGate.prometheusURL: must not carry a query or fragment, got 'http://p:9090/?x=1'"),
        (A + "  alerts: ['']\n", "alertGate.alerts: not an alert name: ''"),
        (A + "  matchers: [{label: a-b, regex: x}]\n",
         "alertGate.matchers.0.label: not a Prometheus label name: 'a-b'"),
        (A + "  matchers: [{label: team, regex: '('}]\n",
         "alertGate.matchers.0.regex: not a valid regular expression '(': missing ), unterminated subpattern "
         "at position 0"),
        (A + "  matchers: [{label: team}]\n", "alertGate.matchers.0.regex: Field required"),
        (A + "  alerts: [X]\n  timeoutSeconds: '5'\n", "alertGate.timeoutSeconds: Input should be a valid integer"),
        (A + "  alerts: [X]\n  timeoutSeconds: 0\n",
         "alertGate.timeoutSeconds: Input should be greater than or equal to 1"),
        (A + "  alerts: [X]\n  timeoutSeconds: 61\n",
         "alertGate.timeoutSeconds: Input should be less than or equal to 60"),
        (A + "  alerts: [X]\n  filter: x\n", "alertGate.filter: unknown key"),
    ],
)
def test_a_bad_alert_gate_is_one_line_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_policy(str(path))
    assert str(err.value) == f"policy {path}: {message}"


@pytest.mark.parametrize("text", ["alertGate:\n", "{}\n"])
def test_no_alert_gate_keeps_todays_behaviour(tmp_path: Path, text: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    assert load_policy(str(path)).alert_gate is None


# ----- whole passes ----------------------------------------------------------------------------

FIRING = (
    'alert gate: GPUServingSLOBurn{severity="warning", namespace="serve"} since 2023-11-14T22:03:20Z is firing '
    "in Prometheus http://prometheus.monitoring:9090; nodes in progress finish, none starts until it resolves; "
    "see runbooks/alert-gate.md"
)
UNREACHABLE = (
    "alert gate: cannot read alerts from Prometheus http://prometheus.monitoring:9090 (unreachable: Connection "
    "refused); nodes in progress finish, none starts until it answers (fail closed); see runbooks/alert-gate.md"
)


def fleet(zones: tuple[str, str] = ("z", "z")) -> World:
    nodes = [node(name, S.UPGRADE_REQUIRED, zone=zone) for name, zone in zip(("a", "b"), zones, strict=True)]
    pods = [p for n in ("a", "b") for p in (driver_pod(n, revision=OLD), validator(n), gpu_pod(f"train-{n}", n))]
    return World(snapshot(nodes, pods))


def run(world: World, now: float, reading: AlertReading, events: list[Event], **extra: Any) -> PassOutcome:
    """One pass as the controller runs it: Prometheus read first; the status written is the next `previous`."""

    def apply(actions: list[Any]) -> list[Any]:
        events.extend(a for a in actions if isinstance(a, Event) and a.message.startswith("rollout waiting"))
        return world.apply(actions)

    world.snap = replace(world.snap, alerts=reading)
    outcome = reconcile(world.snap, policy(maxParallelUpgrades=1, alertGate=GATE, **extra), now, apply)
    world.snap = replace(world.snap, control=Control(previous=outcome.status))
    return outcome


def states(world: World) -> dict[str, str]:
    return {n.name: n.labels.get(STATE_LABEL, "") for n in world.snap.nodes.values()}


def test_no_start_while_an_alert_fires_in_progress_finishes_next_starts_when_it_resolves() -> None:
    world, events = fleet(), list[Event]()
    firing, quiet = AlertReading((BURN,)), AlertReading(())
    held = run(world, T0, firing, events)
    assert held.started == [] and states(world) == {"a": "upgrade-required", "b": "upgrade-required"}
    assert (held.status.phase, held.status.message) == ("Running", FIRING)
    assert held.status.waiting_on.reason == "alert-firing"
    assert held.status.waiting_on.runbook == "runbooks/alert-gate.md"
    assert held.status.alert_gate == GateReport(
        False, URL, (FIRING.split(" is firing")[0].removeprefix("alert gate: "),), None
    )
    assert run(world, T0 + 60, firing, events).started == []

    resolved = run(world, T0 + 120, quiet, events)
    assert resolved.started == ["a"] and resolved.status.alert_gate.open is True
    now = T0 + 120
    while states(world)["a"] != "upgrade-done":  # the alert fires again: a goes on all the same
        now += 60
        assert now < T0 + 3600
        run(world, now, firing, events)
    assert states(world)["b"] == "upgrade-required"
    last = run(world, now + 60, firing, events)
    assert (last.started, last.status.message) == ([], FIRING)

    assert run(world, now + 120, quiet, events).started == ["b"]
    # One Event per wait, however many passes it lasts: the alert on a (next to start), then, with a in
    # progress, on b: the gate speaks before maxParallelUpgrades, as a closed maintenance window does.
    assert events == [
        Event("a", "Warning", f"rollout waiting: {FIRING}"),
        Event("b", "Warning", f"rollout waiting: {FIRING}"),
    ]


def test_an_unreachable_prometheus_stops_starts_with_its_own_reason() -> None:
    world, events = fleet(), list[Event]()
    down = AlertReading(error="unreachable: Connection refused")
    for minute in range(3):
        outcome = run(world, T0 + 60 * minute, down, events)
        assert outcome.started == []
    assert (outcome.status.phase, outcome.status.message) == ("Running", UNREACHABLE)
    assert outcome.status.waiting_on.reason == "alert-gate-unavailable"
    assert outcome.status.alert_gate == GateReport(False, URL, (), "unreachable: Connection refused")
    assert events == [Event("a", "Warning", f"rollout waiting: {UNREACHABLE}")]
    assert run(world, T0 + 180, AlertReading(()), events).started == ["a"]


def test_a_new_alert_firing_is_a_new_wait_and_event() -> None:
    world, events = fleet(), list[Event]()
    run(world, T0, AlertReading((BURN,)), events)
    both = run(world, T0 + 60, AlertReading((BURN, DISK)), events)
    assert both.status.waiting_on.alerts == both.status.alert_gate.firing
    assert both.status.message.startswith(
        'alert gate: GPUServingSLOBurn{severity="warning", namespace="serve"} since 2023-11-14T22:03:20Z, '
        'NodeDiskFull{severity="critical", team="gpu-infra"} since 2023-11-14T22:12:20Z are firing in Prometheus'
    )
    assert both.status.message.endswith("none starts until they resolve; see runbooks/alert-gate.md")
    assert len(events) == 2


def test_the_next_domain_does_not_start_after_its_soak_while_an_alert_fires() -> None:
    world, events = fleet(("z1", "z2")), list[Event]()
    soak = {"failureDomains": {"order": ["z1", "z2"], "soakSeconds": 600}}
    a = node("a", S.DONE, zone="z1", since=0, annotations={SINCE_STATE: "upgrade-done"})
    pods = {**world.snap.driver_pods, "a": [driver_pod("a", revision=NEW, ready=True)]}
    world.snap = replace(world.snap, nodes={**world.snap.nodes, "a": a}, driver_pods=pods)
    soaking = run(world, T0 + 60, AlertReading((BURN,)), events, **soak)
    assert soaking.status.waiting_on.reason == "soak"  # the soak speaks first while it lasts
    after = run(world, T0 + 600, AlertReading((BURN,)), events, **soak)
    assert (after.started, after.status.message) == ([], FIRING)
    assert run(world, T0 + 660, AlertReading(()), events, **soak).started == ["b"]


def test_without_a_gate_nodes_start_whatever_the_snapshot_says() -> None:
    world = fleet()
    world.snap = replace(world.snap, alerts=AlertReading(error="unreachable: Connection refused"))
    outcome = reconcile(world.snap, policy(maxParallelUpgrades=1), T0, world.apply)
    assert outcome.started == ["a"] and outcome.status.alert_gate is None
