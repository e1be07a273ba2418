"""failureDomains.canaryNodes end to end: the controller against the emulator, on a virtual clock,
starts the canary domain's first node alone, the rest of the domain after it is done and has soaked; the audit
that judges it catches a rollout that did not stage its canary (docs/policy.md#canary-nodes)."""

from __future__ import annotations

from upgrader.core.model.states import STATE_LABEL, State
from upgrader.core.policy.policy import policy_from_mapping
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build
from upgrader.sim.proving.invariants import RolloutRecorder

from .conftest import FAST_POLICY
from .test_rollout_object import SPEC, World

STAGED = {**FAST_POLICY, "maxParallelUpgrades": 4, "maxUnavailable": "100%",
          "failureDomains": {"canary": "us-east-1a", "canaryNodes": 1, "soakSeconds": 1}}


def test_the_first_canary_node_goes_alone_and_the_rest_after_its_soak() -> None:
    w = World({**SPEC, "maxParallelUpgrades": 4, "maxUnavailable": "100%",
               "failureDomains": {"canary": "us-east-1a", "canaryNodes": 1, "soakSeconds": 30}})
    waits = []
    for _ in range(600):
        w.run(1)
        waits.append(w.waiting_on().get("reason"))
        if w.obj["status"].get("phase") == "Done":
            break
    assert w.obj["status"]["phase"] == "Done"
    domain_of = {n: z for z, nodes in w.info.domains.items() for n in nodes}
    assert w.recorder.check(w.controller.policy, domain_of, "us-east-1a") == []
    canary = [s for s in w.recorder.starts() if domain_of[s.node] == "us-east-1a"]
    first = canary[0].node
    done = next(rec for rec in w.recorder.records if rec.node == first and rec.state == State.DONE.value)
    # the soak counts from the node's state-since, stamped in whole seconds
    assert all(s.time >= int(done.time) + 30 for s in canary[1:]), "the rest waited for the first node and its soak"
    assert "canary-nodes" in waits and "soak" in waits, "both waits were said in the object's status"


def test_the_audit_catches_a_canary_domain_that_was_not_staged_or_did_not_soak() -> None:
    cluster = EmulatedCluster.virtual()
    info = build(cluster, "healthy", 9)
    recorder = RolloutRecorder(cluster)
    domain_of = {n: z for z, nodes in info.domains.items() for n in nodes}

    def label(name: str, state: State) -> None:
        body = {"metadata": {"labels": {STATE_LABEL: state.value}}}
        cluster.store.patch(cluster.type("nodes"), None, name, "application/merge-patch+json", body)

    for name in info.nodes:
        label(name, State.UPGRADE_REQUIRED)
    label("gpu-a-01", State.CORDON_REQUIRED)
    label("gpu-a-02", State.CORDON_REQUIRED)  # alongside the first: not staged
    cluster.advance(5)
    label("gpu-a-01", State.DONE)
    cluster.advance(0.5)
    label("gpu-a-03", State.CORDON_REQUIRED)  # after the first was done, within the soak
    assert recorder.check(policy_from_mapping(STAGED), domain_of, "us-east-1a") == [
        f"rv {rv}: {node} (canary domain us-east-1a) {why}"
        for rv, node, why in (
            (recorder.starts()[1].rv, "gpu-a-02", "started before its first 1 nodes were done: gpu-a-01 not yet"),
            (recorder.starts()[2].rv, "gpu-a-03", "started within the 1s soak after its first 1 nodes"),
        )
    ]
    unstaged = {**STAGED, "failureDomains": {"canary": "us-east-1a"}}
    assert recorder.check(policy_from_mapping(unstaged), domain_of, "us-east-1a") == []
