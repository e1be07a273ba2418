"""promotionGate end to end on a virtual clock: after the canary domain the rollout waits, says so
on the object, and starts nothing more until `upgrader promote` (a spec change the CLI makes) lets it
on; `promote` refuses with one line when there is nothing to promote (docs/policy.md#promotion)."""

from __future__ import annotations

from pathlib import Path

import pytest

from upgrader.commands.cli import main

from .test_rollout_object import SPEC, World

GATED = {**SPEC, "maxParallelUpgrades": 2, "promotionGate": "canary", "waitForCompletion": None}


def test_the_canary_waits_for_promote_then_the_rollout_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = World(GATED)
    kubeconfig = w.serve(tmp_path)
    try:
        w.run_until_waiting("awaiting-promotion")
        waiting = w.obj["status"]["waitingOn"]
        assert waiting["stage"] == "us-east-1a" and waiting["runbook"] == "runbooks/promotion.md", waiting
        w.run(60)
        domain = {n: z for z, nodes in w.info.domains.items() for n in nodes}
        assert {domain[s.node] for s in w.recorder.starts()} == {"us-east-1a"}, "nothing past the gate"
        assert w.condition("Progressing")["reason"] == "Waiting"

        capsys.readouterr()
        assert main(["promote", "--kubeconfig", kubeconfig, "--rollout", "default"]) == 0
        assert capsys.readouterr().out == (
            f"promoted us-east-1a (finished at {waiting['finishedAt']}): the promotion gate opens; "
            "the next pass goes on\n"
        )
        assert w.obj["spec"]["promotions"] == [{"stage": "us-east-1a", "finishedAt": waiting["finishedAt"]}]
        w.run(400, until="Done")
        assert w.obj["status"]["phase"] == "Done"
        assert w.recorder.check(w.controller.policy, domain, "us-east-1a") == []

        assert main(["promote", "--kubeconfig", kubeconfig, "--rollout", "default"]) == 1
        assert capsys.readouterr().err == (
            "upgrader: cannot promote: nothing to promote: the rollout is Done; promote ends a soak or a "
            "promotionGate wait (nothing written)\n"
        )
    finally:
        w.cluster.stop()


def test_a_failed_canary_is_refused_promotion_naming_the_acknowledgement() -> None:
    from upgrader.commands.promote import _promotable
    from upgrader.commands.status import Refused

    status = {"phase": "Halted", "waiting_on": None,
              "failed": [{"node": "gpu-a-01", "acknowledged": False}, {"node": "gpu-a-02", "acknowledged": True}]}
    with pytest.raises(Refused) as refused:
        _promotable(status)
    assert str(refused.value) == (
        "nothing to promote: gpu-a-01 upgrade-failed, not acknowledged; promotion is not acknowledgement "
        "(`upgrader acknowledge gpu-a-01` first, nothing written)"
    )
    soak = {"phase": "Running", "waiting_on": {"reason": "soak", "stage": "a", "finished_at": "T"}}
    assert _promotable(soak) == ("a", "T")


def test_a_gate_switched_on_mid_domain_holds_at_the_next_boundary() -> None:
    """`kubectl patch` of promotionGate: everyDomain (with a pause, so that no node of the canary domain's
    rest is in progress when it takes effect) while that rest is half done: the domain finishes (its canary
    nodes already passed), and the rollout waits for a promotion after it."""
    from .test_rollout_object import SPEC, World

    w = World({**SPEC, "failureDomains": {"canary": "us-east-1a", "canaryNodes": 1}}, nodes=12)
    zone = sorted(w.info.domains["us-east-1a"])
    assert len(zone) == 4
    states = w.recorder.final_states
    for _ in range(600):
        w.run(1)
        if sum(states().get(n) == "upgrade-done" for n in zone) == 2:
            break
    w.patch({"paused": True, "promotionGate": "everyDomain"})
    for _ in range(300):
        w.run(1)
        if not any(states().get(n) not in ("upgrade-done", "upgrade-required") for n in w.info.nodes):
            break
    half = [n for n in zone if states().get(n) == "upgrade-required"]
    assert half, "the rest of the canary domain is half done, none of it in progress"
    w.patch({"paused": False})
    w.run(400)
    assert all(states()[n] == "upgrade-done" for n in zone), states()
    waiting = w.waiting_on()
    assert (waiting.get("reason"), waiting.get("stage"), waiting.get("domain")) == (
        "awaiting-promotion", "us-east-1a", "us-east-1b"), waiting
