"""The image installs only what requirements.lock pins: the Dockerfile's pip and RUN steps, and a build
context (.dockerignore) that lets in exactly what the Dockerfile copies."""

from __future__ import annotations

from pathlib import PurePosixPath

from .dockerfile_reader import (
    LOCK_NAME,
    ROOT,
    PipCall,
    Stage,
    context_copies,
    copied_to,
    dockerfile_stages,
    dockerignore_patterns,
    ignored,
    pip_calls,
    shell_commands,
    workdir,
)

# --- the Dockerfile's install steps ----------------------------------------------------------


def assert_installs_exactly_the_lock(stage: Stage, call: PipCall) -> None:
    assert call.verb == "install" and not call.targets, f"pip {call.verb} -r with {call.targets}"
    path = str(workdir(stage) / call.options["--requirement"])
    assert copied_to(stage, path) == [LOCK_NAME], f"pip install -r {path} is not {LOCK_NAME} from the build context"
    # Exactly the lock: no resolver, every file's hash checked, no source builds.
    assert {"--no-deps", "--require-hashes"} <= call.flags, call.flags
    assert call.options.get("--only-binary") == ":all:", call.options
    assert not {"--constraint", "--index-url", "--extra-index-url", "--find-links"} & set(call.options)


def test_runtime_stage_installs_dependencies_only_from_the_lock() -> None:
    final = dockerfile_stages()[-1]
    locked = [call for call in pip_calls(final) if "--requirement" in call.options]
    assert len(locked) == 1, "the runtime stage installs its dependencies with one pip install -r"
    assert_installs_exactly_the_lock(final, locked[0])


def test_no_step_fetches_anything_the_lock_does_not_pin() -> None:
    """Other pip steps only build or install the project's own wheel, without an index.

    And nothing else downloads: Debian's packages are the base image's, moved with its digest.
    """
    for stage in dockerfile_stages():
        for keyword, args in stage.instructions:
            assert keyword != "ADD", f"ADD {args}: use COPY (ADD also fetches URLs)"
            if keyword == "RUN":
                for words in shell_commands(args):
                    program = PurePosixPath(words[0]).name
                    assert program not in ("apt-get", "apt", "curl", "wget", "uv", "pipx"), f"RUN {args}"
    for stage in dockerfile_stages():
        for call in pip_calls(stage):
            if call.verb == "check":
                continue
            if "--requirement" in call.options:
                assert_installs_exactly_the_lock(stage, call)
                continue
            assert call.verb in ("install", "wheel"), f"pip {call.verb}"
            assert "--no-deps" in call.flags, f"pip {call.verb} {call.targets} would resolve dependencies"
            assert call.targets and all(t.startswith((".", "/")) for t in call.targets), call.targets
            assert not {"--index-url", "--extra-index-url", "--find-links"} & set(call.options)
            if call.verb == "install":
                assert "--no-index" in call.flags, f"pip install {call.targets} may reach an index"
            else:  # building: the base image's setuptools, and fail if it no longer fits pyproject
                assert {"--no-build-isolation", "--check-build-dependencies"} <= call.flags, call.flags
    final = dockerfile_stages()[-1]
    assert any(call.verb == "check" for call in pip_calls(final)), "the runtime stage runs pip check"


# --- the build context -----------------------------------------------------------------------

EMULATOR = ROOT / "upgrader" / "sim"


def test_dockerignore_lets_in_exactly_what_the_dockerfile_copies() -> None:
    patterns = dockerignore_patterns()
    for dropped in (
        ".venv",
        ".venv/bin/python",
        ".git",
        ".git/HEAD",
        ".pytest_cache/v/cache/lastfailed",
        ".mypy_cache/3.11/x.json",
        ".ruff_cache/content",
        ".hypothesis/examples/x",
        "bench/.data/fleet.json",
        "tests/ops/test_image.py",
        "docs/image.md",
        "sim.kubeconfig",
        "upgrader.egg-info/PKG-INFO",
        "build/lib/upgrader/cli.py",
        "dist/upgrader-0.1.0-py3-none-any.whl",
        "upgrader/__pycache__/cli.cpython-311.pyc",
        "upgrader/core/__pycache__/status.cpython-311.pyc",
        "upgrader/core/status.pyc",
        "upgrader/sim/cluster.py",
        "upgrader/sim/proving/invariants.py",
    ):
        assert ignored(dropped, patterns), f"{dropped} would be sent to the Docker build"
    sources = {src for stage in dockerfile_stages() for srcs in context_copies(stage).values() for src in srcs}
    assert sources >= {"pyproject.toml", "README.md", LOCK_NAME, "upgrader"}, sources
    for source in sorted(sources):
        path = ROOT / source
        files = [path] if path.is_file() else [p for p in path.rglob("*.py") if "__pycache__" not in p.parts]
        assert files, f"COPY {source}: nothing there"
        for file in files:
            if file.is_relative_to(EMULATOR):
                continue  # the emulator stays out on purpose (test_image_context.py)
            relative = file.relative_to(ROOT).as_posix()
            assert not ignored(relative, patterns), f"COPY {source}: .dockerignore drops {relative}"
