"""The DriverRollout deleted mid-rollout (docs/operations.md#the-rollout-object-deleted), on a virtual clock:
the controller says so once in its log, finishes the nodes already in progress under the spec in force
(each uncordoned, none left with our pending taint), starts nothing new, and the metric
`upgrader_rollout_object_missing` is 1; the object created again is judged anew and the rollout goes on
to the end. The CRD deleted (a GitOps prune) is the same state."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from upgrader.commands.cli import main
from upgrader.controller.metrics import Metrics
from upgrader.controller.runner import attach_metrics
from upgrader.core.model.states import IN_PROGRESS, STATE_LABEL

from ..ops.test_metrics import scrape
from .test_rollout_object import ROOT, SPEC, World

PROGRESS = {s.value for s in IN_PROGRESS}
PENDING_TAINT = "gpu-upgrader.io/upgrade-pending"
BODY = {"apiVersion": "gpu-upgrader.io/v1alpha1", "kind": "DriverRollout", "metadata": {"name": "default"}}
TAINTED = {**SPEC, "maxParallelUpgrades": 2, "taintPendingNodes": {"enable": True}}


def nodes(w: World) -> list[dict]:  # type: ignore[type-arg]
    return w.cluster.store.list(w.cluster.type("nodes"), None).items


def states(w: World) -> dict[str, str | None]:
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(STATE_LABEL) for n in nodes(w)}


def run_until_some_past_cordon(w: World) -> set[str]:
    for _ in range(120):
        w.run(1)
        busy = {n for n, s in states(w).items() if s in PROGRESS and s != "cordon-required"}
        if busy:
            return {n for n, s in states(w).items() if s in PROGRESS}
    raise AssertionError("no node got past its cordon")


def missing_gauge(metrics: Metrics) -> float:
    return scrape(metrics)["upgrader_rollout_object_missing"][0][1]


@pytest.mark.parametrize("what", ["object", "crd"])
def test_the_object_deleted_mid_rollout_finishes_what_is_in_progress_and_starts_nothing(
    what: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    w = World(TAINTED, nodes=12)
    metrics = Metrics(leading=lambda: True)
    attach_metrics(w.controller, metrics)
    try:
        busy = run_until_some_past_cordon(w)
        assert missing_gauge(metrics) == 0
        if what == "object":
            w.cluster.store.delete(w.rtype, None, "default")
        else:
            crds = w.cluster.type("customresourcedefinitions", "apiextensions.k8s.io")
            w.cluster.store.delete(crds, None, "driverrollouts.gpu-upgrader.io")
        gone_at = w.cluster.store.resource_version
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="upgrader"):
            for _ in range(600):
                w.controller.reconcile()
                w.cluster.advance(1)
        now = states(w)
        assert {n: now[n] for n in busy} == dict.fromkeys(busy, "upgrade-done")
        assert [s.node for s in w.recorder.starts() if s.rv > gone_at] == []
        assert not any(s in PROGRESS for s in now.values()), now
        assert all(not n["spec"].get("unschedulable") for n in nodes(w))
        assert [n["metadata"]["name"] for n in nodes(w)
                if any(t["key"] == PENDING_TAINT for t in n["spec"].get("taints") or [])] == []
        gone = [r.getMessage() for r in caplog.records if "stays for the nodes in progress" in r.getMessage()]
        assert len(gone) == 1, [r.getMessage() for r in caplog.records]
        which = ("driverrollout.gpu-upgrader.io/default not found" if what == "object"
                 else "the cluster does not serve driverrollouts.gpu-upgrader.io")
        assert gone[0].startswith(which), gone[0]
        assert missing_gauge(metrics) == 1
        assert w.controller.reconcile().status.phase.value == "Paused"
        kubeconfig = w.serve(tmp_path)
        capsys.readouterr()
        named = main(["status", "--kubeconfig", kubeconfig, "--rollout", "default"])
        said = capsys.readouterr().err
        assert named == 1 and said.startswith(f"upgrader: {which}") and said.rstrip().endswith(
            "; if it was deleted, a controller that had a spec in force finishes the nodes in progress and starts "
            "none (runbooks/rollout-object-missing.md)"), said
        if what == "object":  # the CRD served and no object: the bare command says a deleted one may be why
            assert main(["status", "--kubeconfig", kubeconfig]) == 1
            assert "the cluster serves driverrollouts but has none (kubectl get dro): if one was deleted" in (
                capsys.readouterr().err)

        if what == "crd":
            crds = w.cluster.type("customresourcedefinitions", "apiextensions.k8s.io")
            w.cluster.store.create(crds, None, yaml.safe_load((ROOT / "deploy" / "crd.yaml").read_text()))
        w.cluster.store.create(w.rtype, None, {**BODY, "spec": TAINTED})
        w.run(900, until="Done")
        assert w.obj["status"]["phase"] == "Done", w.obj["status"]
        assert set(states(w).values()) == {"upgrade-done"}
        assert missing_gauge(metrics) == 0
    finally:
        w.cluster.stop()
