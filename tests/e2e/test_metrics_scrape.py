"""Scrape /metrics while the controller rolls the emulated fleet: nodes per state always add up."""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from upgrader.controller.metrics import transition_pairs
from upgrader.controller.runner import serve_metrics, start_watches
from upgrader.core.model.states import STATE_COUNT_KEYS

from .conftest import Rollout


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def scrape_during(r: Rollout, until: str, hold: float, timeout: float = 90) -> list[dict[str, Any]]:
    controller = r.controller()
    server = serve_metrics(controller, 0)
    stop, wake = threading.Event(), threading.Event()
    start_watches(controller, stop, wake)
    loop = threading.Thread(target=controller.run, args=(stop, wake), daemon=True)
    loop.start()
    scrapes, held = [], None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            sample = scrape(server.port)
            scrapes.append(sample)
            phase = {labels["phase"] for labels, v in sample.get("upgrader_rollout_phase", []) if v == 1}
            if until in phase:
                held = held or time.monotonic()
                if time.monotonic() - held >= hold:
                    return scrapes
            time.sleep(0.1)
        raise AssertionError(f"never reached {until}")
    finally:
        stop.set()
        wake.set()
        loop.join(timeout=10)
        server.stop()


def test_nodes_per_state_add_up_at_every_scrape(rollout: Any) -> None:
    r: Rollout = rollout("healthy")
    scrapes = scrape_during(r, "Done", hold=0.3)
    passed = [s for s in scrapes if any(v for _, v in s.get("upgrader_reconcile_total", []))]
    assert len(passed) > 20, "the rollout was scraped all along"
    states_seen: set[str] = set()
    for sample in passed:
        nodes = {labels["state"]: value for labels, value in sample["upgrader_nodes"]}
        assert set(nodes) == set(STATE_COUNT_KEYS), "every state and unlabelled has a series, zeros included"
        assert sum(nodes.values()) == 6
        states_seen |= {state for state, value in nodes.items() if value}
    assert {"pod-deletion-required", "pod-restart-required", "upgrade-done"} <= states_seen
    last = passed[-1]
    assert dict((lbl["state"], v) for lbl, v in last["upgrader_nodes"])["upgrade-done"] == 6
    transitions = {(lbl["from_state"], lbl["to_state"]) for lbl, v in last["upgrader_state_transitions_total"] if v}
    assert ("validation-required", "uncordon-required") in transitions
    # Every transition written had its series, at 0, from the first scrape: increase() sees it.
    first = {(lbl["from_state"], lbl["to_state"]) for lbl, _ in scrapes[0]["upgrader_state_transitions_total"]}
    assert transitions <= first == set(transition_pairs())
    assert any(
        v > 0 for lbl, v in last["upgrader_state_duration_seconds_count"] if lbl["state"] == "pod-restart-required"
    )
    assert any(
        lbl["verb"] == "patch" and lbl["outcome"] == "ok" and v > 0 for lbl, v in last["upgrader_api_requests_total"]
    )
    domains = {lbl["domain"] for lbl, v in last["upgrader_domain_nodes"]}
    assert domains == {"us-east-1a", "us-east-1b", "us-east-1c"}


def test_pdb_blocked_rollout_shows_halted_and_the_reason(rollout: Any) -> None:
    r: Rollout = rollout("pdb-blocked")
    last = scrape_during(r, "Halted", hold=1.0)[-1]
    assert last["upgrader_rollout_halted"] == [({}, 1.0)]
    blocked = {lbl["reason"]: v for lbl, v in last["upgrader_blocked_nodes"]}
    assert blocked["pdb"] >= 1
    info = [lbl for lbl, v in last["upgrader_node_blocked_info"] if v == 1]
    assert {"node": r.info.blocked_node, "state": "pod-deletion-required", "reason": "pdb"} in info
