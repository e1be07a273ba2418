"""The bad-input campaign ("Prove it holds"): every entry of CORPUS is fed to the real CLI.

Project rule: bad input (policy, labels, files, flags) gets a one-line error naming what is wrong
and exit code 2, never a traceback, never a write. For each case this proves:

- exit code 2;
- stderr is exactly one line, starting `upgrader: error: `, holding the case's expected words
  (the field path, the file, the item index, the flag);
- nothing on stdout, no `Traceback`;
- no request at all reaches the emulated cluster that every cluster command is pointed at (bad
  input is refused before connecting), hence no write; and no file appears or changes.

Every case runs in-process through `upgrader.commands.cli.main`; a sample also runs as a real subprocess.
The corpus: bad_input_files.py (policies, kubectl Lists) and bad_input_corpus.py (the rest, CORPUS).
`python -m pytest tests/reliability/test_bad_input.py -s` prints the corpus size by category.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pytest_mock import MockerFixture

from upgrader.commands.cli import main
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

from .bad_input_corpus import CORPUS, SUBPROCESS_SAMPLE
from .bad_input_files import GOOD, TMP, Case, EmptyDir, F, K

# ----- the emulated cluster every cluster command is pointed at ------------------------------------


@dataclass
class Target:
    cluster: EmulatedCluster
    kubeconfig: Path
    good_list: Path
    fleet: dict[str, Any]
    writes_before: int


LIST_KINDS = [("nodes", "", "v1"), ("pods", "", "v1"), ("poddisruptionbudgets", "policy", "v1"),
              ("daemonsets", "apps", "v1"), ("controllerrevisions", "apps", "v1"), ("jobs", "batch", "v1"),
              ("nvidiadrivers", "nvidia.com", "v1alpha1"), ("clusterpolicies", "nvidia.com", "v1")]


def _writes(cluster: EmulatedCluster) -> list[Any]:
    return [r for r in cluster.requests if r.method not in ("GET",)]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    base = tmp_path_factory.mktemp("cluster")
    cluster = EmulatedCluster()
    build(cluster, "healthy")
    cluster.serve()
    kubeconfig = cluster.write_kubeconfig(base / "kubeconfig")
    items = []
    for plural, group, version in LIST_KINDS:
        items.extend(cluster.store.list(cluster.type(plural, group, version)).items)
    fleet = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
    good_list = base / "fleet.json"
    good_list.write_text(json.dumps(fleet))
    try:
        yield Target(cluster, kubeconfig, good_list, fleet, len(_writes(cluster)))
    finally:
        cluster.stop()


def _materialise(case: Case, directory: Path, target: Target) -> dict[str, str]:
    path = directory / case.name
    content = case.content
    if isinstance(content, EmptyDir):
        path.mkdir()
    elif callable(content):
        content = content(target.fleet)
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    return {K: str(target.kubeconfig), F: str(path), GOOD: str(target.good_list), TMP: str(directory)}


def _fill(text: str, tokens: Mapping[str, str]) -> str:
    for token, value in tokens.items():
        text = text.replace(token, value)
    return text


def _files(directory: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None) for p in directory.rglob("*")}


def _check(case: Case, code: int | str | None, out: str, err: str, tokens: Mapping[str, str]) -> None:
    shown = f"{case.id}: exit {code}, stdout {out!r}, stderr {err!r}"
    assert "Traceback" not in err + out, shown
    assert code == 2, shown
    assert err.startswith("upgrader: error: "), shown
    assert err.endswith("\n") and err.count("\n") == 1, shown
    for words in case.expect:
        assert _fill(words, tokens) in err, f"{shown}: expected {_fill(words, tokens)!r}"
    assert out == "", shown


def _clean_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    for name in list(os.environ):
        if name.startswith("UPGRADER_") or name == "KUBECONFIG":
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _guard_long_runs(mocker: MockerFixture) -> None:
    """Input accepted by mistake must fail the case, not run a controller, demo or server for ever."""

    def reached(what: str) -> AssertionError:
        return AssertionError(f"bad input was accepted: {what} started")

    mocker.patch("upgrader.controller.runner.run_until_signalled", side_effect=reached("the controller loop"))
    mocker.patch("upgrader.commands.demo.run_demo", side_effect=reached("the demo"))
    mocker.patch.object(EmulatedCluster, "serve", side_effect=reached("an emulated cluster's server"))


def test_the_fleet_and_the_cluster_are_good(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    """Controls: the good list plans cleanly, and the request log sees what the kubeconfig sends."""
    assert main(["plan", "--dry-run", "--from-file", str(target.good_list), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["to_upgrade"] == 6
    before = len(target.cluster.requests)
    assert main(["plan", "--dry-run", "--kubeconfig", str(target.kubeconfig), "-o", "json"]) == 0
    capsys.readouterr()
    assert len(target.cluster.requests) > before, "requests through this kubeconfig are seen"


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_bad_input_is_one_line_exit_2_and_no_request(case: Case, target: Target, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, mocker: MockerFixture,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    tokens = _materialise(case, tmp_path, target)
    _clean_env(monkeypatch, case.env)
    _guard_long_runs(mocker)
    files = _files(tmp_path)
    requests = len(target.cluster.requests)
    capsys.readouterr()
    try:
        code: int | str | None = main([_fill(a, tokens) for a in case.argv])
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    _check(case, code, out, err, tokens)
    sent = target.cluster.requests[requests:]
    assert sent == [], f"{case.id}: bad input reached the cluster: {[(r.method, r.path) for r in sent]}"
    assert _files(tmp_path) == files, f"{case.id}: a file was written"


def test_a_sample_as_real_processes(target: Target, tmp_path: Path) -> None:
    executable = Path(sys.executable).with_name("upgrader")
    cases = [c for c in CORPUS if c.id in SUBPROCESS_SAMPLE]
    assert len(cases) == len(SUBPROCESS_SAMPLE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UPGRADER_") and k != "KUBECONFIG"}
    requests = len(target.cluster.requests)
    running = []
    for case in cases:
        directory = tmp_path / case.id
        directory.mkdir()
        tokens = _materialise(case, directory, target)
        process = subprocess.Popen([str(executable), *(_fill(a, tokens) for a in case.argv)], env={**env, **case.env},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        running.append((case, tokens, directory, _files(directory), process))
    for case, tokens, directory, files, process in running:
        out, err = process.communicate(timeout=60)
        _check(case, process.returncode, out, err, tokens)
        assert _files(directory) == files, f"{case.id}: a file was written"
    assert target.cluster.requests[requests:] == []


def test_no_write_reached_the_cluster_and_the_corpus_is_big_enough(target: Target) -> None:
    assert len(_writes(target.cluster)) == target.writes_before
    by_category = Counter(c.category for c in CORPUS)
    print(f"\nbad-input corpus: {len(CORPUS)} cases: "
          + ", ".join(f"{name} {count}" for name, count in sorted(by_category.items())))
    assert len({c.id for c in CORPUS}) == len(CORPUS)
    assert len(CORPUS) >= 60


# ----- the boundary: garbage in well-formed labels is a finding (exit 1), not bad input ----------


def _relabel(fleet: dict[str, Any], node: str, labels: Mapping[str, str]) -> dict[str, Any]:
    items = []
    for item in fleet["items"]:
        if item["kind"] == "Node" and item["metadata"]["name"] == node:
            meta = item["metadata"]
            item = {**item, "metadata": {**meta, "labels": {**meta["labels"], **labels}}}
        items.append(item)
    return {**fleet, "items": items}


@pytest.mark.parametrize(("labels", "words"), [
    ({"nvidia.com/cuda.driver.major": "abc"}, "not a version"),
    ({"nvidia.com/gpu-driver-upgrade-state": "half-done"}, "unknown upgrade state"),
    ({"feature.node.kubernetes.io/kernel-version.full": "unknown kernel"}, "kernel"),
], ids=["driver-major-abc", "state-half-done", "kernel-garbage"])
def test_garbage_in_well_formed_labels_is_a_finding_not_bad_input(
        labels: dict[str, str], words: str, target: Target, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    listing = tmp_path / "fleet.json"
    listing.write_text(json.dumps(_relabel(target.fleet, "gpu-b-01", labels)))
    capsys.readouterr()
    code = main(["plan", "--dry-run", "--from-file", str(listing), "-o", "json"])
    out, err = capsys.readouterr()
    assert (code, err) == (1, "")
    invalid = [f for f in json.loads(out)["findings"] if f["kind"] == "invalid-node-data"]
    assert [f["node"] for f in invalid] == ["gpu-b-01"]
    assert words in invalid[0]["message"]

