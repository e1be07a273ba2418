"""Issue 11, "Inputs": every file a user hands over is bounded in size (checked before parsing) and
in nesting, so a huge or deeply nested file is one line and exit 2, never a traceback, minutes of
parsing or gigabytes of memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from upgrader.commands.cli import main
from upgrader.inputs import FROM_FILE_MAX_MIB, MIB
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.scenarios import build

TOO_DEEP = "nested too deeply (lists or maps about 1,000 levels deep; kubectl never writes that)"
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a-01"}, "spec": {}, "status": {}}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("UPGRADER_") or name == "KUBECONFIG":
            monkeypatch.delenv(name)


def _one_error_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI in-process; assert exit 2, nothing on stdout, one line on stderr; return it."""
    capsys.readouterr()
    try:
        code: int | str | None = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    return err.removesuffix("\n")


def _write(path: Path, content: str | bytes) -> str:
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return str(path)


# ----- nesting --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "[" * 10**6,  # the reproduction: a RecursionError traceback
        "[" * 10**5 + "]" * 10**5,
        '{"kind": "List", "items": ' + "[" * 5000 + "]" * 5000 + "}",
        "items: " + "[" * 10**5 + "\n",  # YAML: libyaml's own bound
        "items:\n" + "".join("  " * i + "- \n" for i in range(2000)),
    ],
    ids=["json-million-open", "json-closed", "json-in-items", "yaml-flow", "yaml-block"],
)
def test_deep_nesting_in_a_kubectl_list_is_one_line(content: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "fleet.json", content)
    argv = ["plan", "--dry-run", "--from-file", path]
    assert _one_error_line(argv, capsys) == f"upgrader: error: --from-file {path}: {TOO_DEEP}"


def test_a_deep_value_the_plan_quotes_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Near the interpreter's bound: it parses or not, depending on the stack in use, and naming the
    # bad `kind` takes its repr, which recurses too. Either way: one line.
    for depth in (900, 960, 990):
        bad = {"kind": "[" * depth + "]" * depth, "metadata": {"name": "x"}}
        path = tmp_path / f"fleet-{depth}.json"
        text = json.dumps({"kind": "List", "items": [NODE, bad]}).replace(json.dumps(bad["kind"]), bad["kind"])
        path.write_text(text)
        message = _one_error_line(["plan", "--dry-run", "--from-file", str(path)], capsys)
        assert message.startswith(f"upgrader: error: --from-file {path}: ")
        assert TOO_DEEP in message or "item 1 has kind that is not a string (list [[[" in message


def test_a_million_brackets_as_a_real_process(tmp_path: Path) -> None:
    path = _write(tmp_path / "fleet.json", "[" * 10**6)
    env = {k: v for k, v in os.environ.items() if not k.startswith("UPGRADER_")}
    done = subprocess.run([str(Path(sys.executable).with_name("upgrader")), "plan", "--dry-run", "--from-file", path],
                          capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"upgrader: error: --from-file {path}: {TOO_DEEP}\n")


@pytest.mark.parametrize(
    ("flag", "content", "message"),
    [
        ("--policy", "drain: " + "[" * 10**6 + "\n", "policy {path}: nested deeper than 64 levels at line 1"),
        ("--profiles", "profiles: " + "[" * 10**5 + "\n", "profiles {path}: nested too deeply"),
        ("--kubeconfig", "clusters: " + "[" * 10**5 + "\n",
         "kubeconfig {path}: nested deeper than 64 levels at line 1"),
    ],
)
def test_deep_nesting_in_yaml_inputs_is_one_line(flag: str, content: str, message: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "input.yaml", content)
    fleet = _write(tmp_path / "fleet.json", json.dumps({"kind": "List", "items": [NODE]}))
    source = ["--kubeconfig", path] if flag == "--kubeconfig" else ["--from-file", fleet, flag, path]
    argv = ["plan", "--dry-run", *source]
    assert _one_error_line(argv, capsys) == "upgrader: error: " + message.format(path=path)


# ----- size -----------------------------------------------------------------------------------------


def test_a_kubectl_list_past_512_mib_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.json"
    with open(path, "wb") as file:
        file.truncate(FROM_FILE_MAX_MIB * MIB + 1)  # sparse: nothing is written, nor read
    assert _one_error_line(["plan", "--dry-run", "--from-file", str(path)], capsys) == (
        f"upgrader: error: --from-file {path}: larger than the limit of 512 MiB (536,870,913 bytes); "
        "UPGRADER_FROM_FILE_MAX_MIB raises it"
    )


def test_upgrader_from_file_max_mib_sets_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cluster = EmulatedCluster.virtual()
    build(cluster, "healthy")  # a whole fleet (a nodes-only file is refused: issue 13), one node 1 MiB larger
    cluster.store.mutate(cluster.type("nodes"), None, "gpu-a-01",
                         lambda n: n["metadata"].setdefault("annotations", {}).__setitem__("note", "x" * MIB))
    items = [o for plural, group in (("nodes", ""), ("pods", ""), ("poddisruptionbudgets", "policy"),
                                     ("daemonsets", "apps"), ("controllerrevisions", "apps"),
                                     ("clusterpolicies", "nvidia.com"))
             for o in cluster.store.list(cluster.type(plural, group)).items]
    path = _write(tmp_path / "fleet.json", json.dumps({"kind": "List", "items": items}))
    size = Path(path).stat().st_size
    monkeypatch.setenv("UPGRADER_FROM_FILE_MAX_MIB", "1")
    assert _one_error_line(["plan", "--dry-run", "--from-file", path], capsys) == (
        f"upgrader: error: --from-file {path}: larger than the limit of 1 MiB ({size:,} bytes); "
        "UPGRADER_FROM_FILE_MAX_MIB raises it"
    )
    monkeypatch.setenv("UPGRADER_FROM_FILE_MAX_MIB", "2")
    assert main(["plan", "--dry-run", "--from-file", path, "-o", "json"]) in (0, 1)
    out, err = capsys.readouterr()
    assert err == "" and "summary" in json.loads(out)


def test_upgrader_from_file_max_mib_must_be_positive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("UPGRADER_FROM_FILE_MAX_MIB", "0")
    assert _one_error_line(["plan", "--dry-run", "--from-file", str(tmp_path / "x.json")], capsys) == (
        "upgrader: error: settings: UPGRADER_FROM_FILE_MAX_MIB='0': Input should be greater than or equal to 1"
    )


@pytest.mark.parametrize("command", [["run", "--once", "--kubeconfig", "{kc}"], ["demo"],
                                     ["plan", "--dry-run", "--from-file", "{fleet}"]])
def test_a_policy_past_1_mib_is_refused_by_every_command(command: list[str], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    policy = _write(tmp_path / "policy.yaml", "maxParallelUpgrades: 2\n" + "#" * MIB + "\n")
    tokens = {"kc": str(tmp_path / "kubeconfig"), "fleet": str(tmp_path / "fleet.json")}
    argv = [a.format(**tokens) for a in command] + ["--policy", policy]
    assert _one_error_line(argv, capsys) == (
        f"upgrader: error: policy {policy}: larger than the limit of 1 MiB ({MIB + 24:,} bytes)"
    )


@pytest.mark.parametrize(
    ("flag", "limit"),
    [("--ledger", "16 MiB"), ("--profiles", "1 MiB"), ("--kubeconfig", "4 MiB")],
)
def test_plans_other_inputs_are_bounded(flag: str, limit: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "input"
    with open(path, "wb") as file:
        file.truncate(int(limit.split()[0]) * MIB + 1)
    fleet = _write(tmp_path / "fleet.json", json.dumps({"kind": "List", "items": [NODE]}))
    source = ["--kubeconfig", str(path)] if flag == "--kubeconfig" else ["--from-file", fleet, flag, str(path)]
    what = "kubeconfig" if flag == "--kubeconfig" else flag
    assert _one_error_line(["plan", "--dry-run", *source], capsys) == (
        f"upgrader: error: {what} {path}: larger than the limit of {limit} ({int(limit.split()[0]) * MIB + 1:,} bytes)"
    )
