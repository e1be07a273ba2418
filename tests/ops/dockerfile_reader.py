"""Reads the project's Dockerfile as Docker does, without Docker: stages, instructions, RUN commands,
pip calls and COPY sources; shared by test_image.py and test_image_build.py."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent.parent
LOCK_NAME = "requirements.lock"


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
