"""The image is reproducible: base image pinned, runtime dependencies only from requirements.lock.

Read from the files themselves (no Docker needed): the Dockerfile's FROM/COPY/RUN instructions,
requirements.lock, pyproject.toml, .dockerignore and docs/image.md. How the pieces fit:
docs/image.md. That the Dockerfile builds from the project's metadata, slim and non-root, is
tests/ops/test_deploy.py's part.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent.parent
LOCK_NAME = "requirements.lock"
BASE_IMAGE = re.compile(
    r"python:(?P<version>\d+\.\d+\.\d+)-slim-(?P<debian>[a-z]+)@sha256:(?P<digest>[0-9a-f]{64})"
)


# --- Dockerfile ------------------------------------------------------------------------------


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue  # Docker drops comment lines, also inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def dockerfile_stages() -> list[Stage]:
    stages: list[Stage] = []
    for keyword, args in dockerfile_instructions((ROOT / "Dockerfile").read_text()):
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            assert len(words) in (1, 3) and not words[0].startswith("--"), f"unexpected FROM {args}"
            stages.append(Stage(words[0], name))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, args))
    return stages


def base_images(stages: list[Stage]) -> list[str]:
    names = {stage.name for stage in stages if stage.name}
    return [stage.image for stage in stages if stage.image not in names]


def shell_commands(run_args: str) -> list[list[str]]:
    """A RUN line's simple commands (split at && ; ||), each as its words."""
    lexer = shlex.shlex(run_args, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", ";", "||"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [command for command in commands if command]


@dataclass
class PipCall:
    verb: str
    flags: set[str]
    options: dict[str, str]
    targets: list[str]


PIP_VALUE_OPTIONS = {
    "-r": "--requirement",
    "--requirement": "--requirement",
    "-c": "--constraint",
    "--constraint": "--constraint",
    "-w": "--wheel-dir",
    "--wheel-dir": "--wheel-dir",
    "-i": "--index-url",
    "--index-url": "--index-url",
    "--extra-index-url": "--extra-index-url",
    "-f": "--find-links",
    "--find-links": "--find-links",
    "--only-binary": "--only-binary",
    "--no-binary": "--no-binary",
    "-t": "--target",
    "--target": "--target",
    "--prefix": "--prefix",
    "--root": "--root",
}


def pip_call(words: list[str]) -> PipCall | None:
    program = PurePosixPath(words[0]).name
    if re.fullmatch(r"pip[\d.]*", program):
        rest = words[1:]
    elif re.fullmatch(r"python[\d.]*", program) and words[1:3] == ["-m", "pip"]:
        rest = words[3:]
    else:
        return None
    if not rest:
        return None
    call = PipCall(rest[0], set(), {}, [])
    args = iter(rest[1:])
    for word in args:
        name, eq, value = word.partition("=")
        if name in PIP_VALUE_OPTIONS:
            # Several -r/-c would be a list; this Dockerfile has at most one of each per call.
            assert PIP_VALUE_OPTIONS[name] not in call.options, f"repeated {name} in pip {call.verb}"
            call.options[PIP_VALUE_OPTIONS[name]] = value if eq else next(args)
        elif word.startswith("-"):
            call.flags.add(word)
        else:
            call.targets.append(word)
    return call


def pip_calls(stage: Stage) -> list[PipCall]:
    calls = []
    for keyword, args in stage.instructions:
        if keyword == "RUN":
            calls += [call for words in shell_commands(args) if (call := pip_call(words))]
    return calls


def workdir(stage: Stage, upto: int | None = None) -> PurePosixPath:
    """The stage's working directory after its first `upto` instructions (all by default)."""
    path = PurePosixPath("/")
    for keyword, args in stage.instructions[:upto]:
        if keyword == "WORKDIR":
            path = path / args
    return path


def context_copies(stage: Stage) -> dict[str, list[str]]:
    """Destination (absolute) -> sources, for each COPY/ADD from the build context."""
    copies: dict[str, list[str]] = {}
    for index, (keyword, args) in enumerate(stage.instructions):
        if keyword not in ("COPY", "ADD"):
            continue
        words = shlex.split(args)
        if any(word.startswith("--from") for word in words):
            continue
        *sources, dest = [word for word in words if not word.startswith("--")]
        copies[str(workdir(stage, index) / dest) + ("/" if dest.endswith("/") else "")] = sources
    return copies


def copied_to(stage: Stage, path: str) -> list[str]:
    """Build-context sources that a COPY in this stage put at path."""
    found = []
    for dest, sources in context_copies(stage).items():
        for source in sources:
            if dest == path or (dest.endswith("/") and dest + PurePosixPath(source).name == path):
                found.append(source)
    return found


# --- requirements.lock -----------------------------------------------------------------------


@dataclass
class Pin:
    name: NormalizedName
    version: Version
    marker: Marker | None
    hashes: list[str]


def read_lock() -> tuple[str, dict[NormalizedName, Pin]]:
    """The lock's generating command (from its header) and its pins."""
    text = (ROOT / LOCK_NAME).read_text()
    header = text.splitlines()[:2]
    assert header[0].startswith("# This file was autogenerated by uv"), header
    command = header[1].removeprefix("#").strip()
    pins: dict[NormalizedName, Pin] = {}
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("-"), f"{LOCK_NAME}: option line {line!r} (indexes etc. belong to pip's config)"
        spec, *hash_words = line.split()
        assert all(word.startswith("--hash=sha256:") for word in hash_words), line
        requirement = Requirement(spec)
        assert requirement.url is None and not requirement.extras, f"{LOCK_NAME}: {spec!r} is not a plain pin"
        specifiers = list(requirement.specifier)
        assert len(specifiers) == 1 and specifiers[0].operator == "==" and "*" not in specifiers[0].version, (
            f"{LOCK_NAME}: {spec!r} is not pinned to one exact version"
        )
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{LOCK_NAME}: {name} pinned twice"
        pins[name] = Pin(
            name,
            Version(specifiers[0].version),
            requirement.marker,
            [word.removeprefix("--hash=sha256:") for word in hash_words],
        )
    return command, pins


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def runtime_requirements() -> list[Requirement]:
    return [Requirement(spec) for spec in pyproject()["project"]["dependencies"]]


def image_python() -> Version:
    images = base_images(dockerfile_stages())
    match = BASE_IMAGE.fullmatch(images[0])
    assert match, images[0]
    return Version(match["version"])


def marker_environment(extra: str = "") -> dict[str, str]:
    """Marker values of the image: CPython at the base image's version on Linux."""
    version = image_python()
    return {
        "python_version": f"{version.major}.{version.minor}",
        "python_full_version": str(version),
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "extra": extra,
    }


# --- the base image --------------------------------------------------------------------------


def test_base_image_is_one_exact_tag_pinned_by_digest() -> None:
    images = base_images(dockerfile_stages())
    assert len(images) >= 2, images  # build stage and runtime stage
    for image in images:
        match = BASE_IMAGE.fullmatch(image)
        assert match, f"{image}: want python:X.Y.Z-slim-<debian>@sha256:<digest> (an exact tag, never latest)"
    # The wheel is built on the interpreter it runs on.
    assert len(set(images)) == 1, images


def test_image_python_fits_the_project_and_the_lock() -> None:
    version = image_python()
    requires_python = pyproject()["project"]["requires-python"]
    assert version in SpecifierSet(requires_python), (version, requires_python)
    command, pins = read_lock()
    match = re.search(r"--python-version[ =](\S+)", command)
    assert match, f"{LOCK_NAME} is not resolved for an explicit Python version: {command}"
    assert match[1] == f"{version.major}.{version.minor}", (
        f"{LOCK_NAME} resolved for Python {match[1]}, the image runs {version}"
    )
    for pin in pins.values():
        assert pin.marker is None or pin.marker.evaluate(marker_environment()), (
            f"{pin.name} {pin.version} is not installed on the image's Python ({pin.marker})"
        )


# --- the lock --------------------------------------------------------------------------------


def test_lock_pins_every_runtime_dependency_within_pyprojects_range() -> None:
    _, pins = read_lock()
    for requirement in runtime_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"pyproject.toml needs {requirement}, {LOCK_NAME} does not pin it"
        assert requirement.specifier.contains(pins[name].version, prereleases=True), (
            f"{LOCK_NAME} pins {name}=={pins[name].version}, pyproject.toml asks {requirement}"
        )


def test_lock_pins_carry_hashes_and_the_command_that_made_them() -> None:
    command, pins = read_lock()
    assert pins
    for pin in pins.values():
        assert pin.hashes and all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in pin.hashes), pin.name
    # The header's command is how the lock is refreshed; docs/image.md quotes it verbatim, with the
    # uv version to run it with.
    assert command.startswith("uv pip compile "), command
    for flag in ("pyproject.toml", "--universal", "--generate-hashes", "--only-binary :all:", f"-o {LOCK_NAME}"):
        assert flag in command, (flag, command)
    doc = (ROOT / "docs" / "image.md").read_text()
    assert command in doc, "docs/image.md does not show the lock's command"
    assert re.search(r"pip install uv==\d+\.\d+\.\d+", doc), "docs/image.md does not pin uv's version"


def test_lock_is_closed_under_dependencies_where_the_dev_venv_has_the_same_versions() -> None:
    """Each pinned package's own requirements are pinned too, and within range.

    A package's requirements come from its installed metadata, so this checks the packages the dev
    venv has at the locked version (all of them while the venv is installed from the lock). In the
    image, `pip check` after the install holds every package to this.
    """
    _, pins = read_lock()
    queue = [(canonicalize_name(r.name), frozenset(r.extras), str(r)) for r in runtime_requirements()]
    queue = [item for item in queue if item[0] in pins]  # an unpinned one fails the test above
    checked: set[tuple[NormalizedName, frozenset[str]]] = set()
    reached: set[NormalizedName] = set()
    unknown: list[str] = []
    problems: list[str] = []
    while queue:
        name, extras, why = queue.pop()
        reached.add(name)
        if (name, extras) in checked:
            continue
        checked.add((name, extras))
        try:
            installed = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            unknown.append(f"{name} (not installed)")
            continue
        if Version(installed.version) != pins[name].version:
            unknown.append(f"{name} (venv {installed.version}, lock {pins[name].version})")
            continue
        for spec in installed.requires or []:
            requirement = Requirement(spec)
            if requirement.marker and not any(
                requirement.marker.evaluate(marker_environment(extra)) for extra in extras | {""}
            ):
                continue
            dep = canonicalize_name(requirement.name)
            if dep not in pins:
                problems.append(f"{name} ({why}) needs {requirement}, not in {LOCK_NAME}")
            elif not requirement.specifier.contains(pins[dep].version, prereleases=True):
                problems.append(f"{name} needs {requirement}, {LOCK_NAME} pins {dep}=={pins[dep].version}")
            else:
                queue.append((dep, frozenset(requirement.extras), f"via {name}"))
    assert not problems, problems
    if unknown:
        pytest.skip(f"dependencies of these are unchecked here: {', '.join(sorted(unknown))}")
    # Everything reached, nothing left over: the lock holds exactly the runtime closure.
    assert set(pins) == reached, f"{LOCK_NAME} pins what nothing requires: {sorted(set(pins) - reached)}"


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


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """(is_exception, regex) per .dockerignore line, as Docker's patternmatcher reads them."""
    patterns = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = str(PurePosixPath(line.removeprefix("!").strip())).lstrip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                regex, i = regex + pattern[i : end + 1], end + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        patterns.append((exception, re.compile(regex)))
    return patterns


def ignored(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent directories wins."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for exception, regex in patterns:
        if exception == excluded and any(regex.fullmatch(candidate) for candidate in candidates):
            excluded = not exception
    return excluded


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
    ):
        assert ignored(dropped, patterns), f"{dropped} would be sent to the Docker build"
    sources = {src for stage in dockerfile_stages() for srcs in context_copies(stage).values() for src in srcs}
    assert sources >= {"pyproject.toml", "README.md", LOCK_NAME, "upgrader"}, sources
    for source in sorted(sources):
        path = ROOT / source
        files = [path] if path.is_file() else [p for p in path.rglob("*.py") if "__pycache__" not in p.parts]
        assert files, f"COPY {source}: nothing there"
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            assert not ignored(relative, patterns), f"COPY {source}: .dockerignore drops {relative}"


def test_docs_show_the_pinned_base_image() -> None:
    doc = (ROOT / "docs" / "image.md").read_text()
    image = base_images(dockerfile_stages())[0]
    assert image in doc, f"docs/image.md does not name the base image {image}"
