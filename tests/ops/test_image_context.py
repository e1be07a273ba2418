"""The image holds what it runs. The build context, as .dockerignore makes it from the repository's
files, is the controller and its commands without the emulator (upgrader/sim, with its proving
harnesses); a copy of exactly that context, as the image would install it, runs `upgrader run --once`
against an emulator served beside it and `plan` from a file, and refuses `demo` and `sim serve` in
one line with exit 2 (docs/image.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.largefleet import kubectl_list
from upgrader.sim.fleets.scenarios import build

from .dockerfile_reader import LOCK_NAME, ROOT, dockerignore_patterns, ignored

EMULATOR = "upgrader/sim/"


@cache
def tracked() -> tuple[str, ...]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return tuple(listed.splitlines())


def context_files() -> list[str]:
    """The files `docker build .` sends from a clean clone: the tracked ones .dockerignore lets in."""
    patterns = dockerignore_patterns()
    return sorted(path for path in tracked() if not ignored(path, patterns))


def test_the_context_is_the_package_without_the_emulator() -> None:
    files = context_files()
    package = [f for f in files if f.startswith("upgrader/")]
    assert set(files) - set(package) == {"pyproject.toml", "README.md", LOCK_NAME}, files
    assert not [f for f in package if f.startswith(EMULATOR)], "the emulator is in the image context"
    wanted = sorted(f for f in tracked() if f.startswith("upgrader/") and not f.startswith(EMULATOR))
    assert package == wanted, "a module left out"
    rooms = {f.split("/")[1] for f in package}
    assert {"core", "kube", "controller", "commands", "inputs.py", "__init__.py"} == rooms, rooms


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's upgrader/: the context's package files, copied as the Dockerfile COPYs them."""
    where = tmp_path_factory.mktemp("image-context")
    for name in context_files():
        if name.startswith("upgrader/"):
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, where / name)
    return where


def in_image(image: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`upgrader ARGV` with only the image's package importable (its dependencies from this venv)."""
    code = (  # an editable install of this checkout would find upgrader.sim beside the copy: not in the image
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith('__editable__')]\n"
        "import upgrader; from upgrader.commands.cli import main\n"
        f"assert upgrader.__file__.startswith({str(image)!r}), upgrader.__file__\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("UPGRADER_") and k != "KUBECONFIG"}
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=image, env={**env, "PYTHONPATH": str(image)},
                          capture_output=True, text=True, timeout=120)


def test_the_image_refuses_the_emulator_commands_in_one_line(image: Path, tmp_path: Path) -> None:
    for argv, named in ((["demo"], "demo"), (["sim", "serve", "--kubeconfig", str(tmp_path / "k")], "sim serve")):
        done = in_image(image, *argv)
        assert (done.returncode, done.stdout) == (2, ""), done
        assert done.stderr == (
            f"upgrader: error: `upgrader {named}` needs the Kubernetes API emulator (upgrader.sim), which this "
            "installation leaves out (the controller image holds only what `run` needs); run it from a "
            "checkout (README.md)\n"
        )
    assert not (tmp_path / "k").exists()
    listed = in_image(image, "--help")
    assert listed.returncode == 0 and "demo" in listed.stdout and "run" in listed.stdout


def test_the_image_runs_the_controller_and_plans(image: Path, tmp_path: Path) -> None:
    cluster = EmulatedCluster()
    build(cluster, "healthy")
    cluster.serve()
    try:
        kubeconfig = str(cluster.write_kubeconfig(tmp_path / "kubeconfig"))
        done = in_image(image, "run", "--once", "--kubeconfig", kubeconfig, "--no-leader-election")
        assert done.returncode == 0, done.stderr
        states = [(n["metadata"].get("labels") or {}).get("nvidia.com/gpu-driver-upgrade-state")
                  for n in cluster.store.objects(cluster.type("nodes"))]
        assert "cordon-required" in states, states  # the canary's first node started
    finally:
        cluster.stop()
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps(kubectl_list(12, 3)))
    planned = in_image(image, "plan", "--dry-run", "--from-file", str(fleet), "-o", "json")
    assert planned.returncode in (0, 1), planned.stderr
    assert len(json.loads(planned.stdout)["nodes"]) == 12
