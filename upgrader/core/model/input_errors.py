"""One-line messages for bad input: a validation error or a YAML error, told the same way everywhere."""

from __future__ import annotations

from pydantic import ValidationError


def printable(text: str) -> str:
    """Text from the input (a key) as it can sit on one line: quoted when it holds a line break."""
    return text if text.isprintable() else repr(text)


def one_line(error: ValidationError, what: str) -> str:
    """`<what>: <field.path>: <problem>`, naming the first problem and how many more there are."""
    first = error.errors()[0]
    where = ".".join(printable(str(p)) for p in first["loc"]) or "(top level)"
    message = printable(str(first["msg"]).removeprefix("Value error, "))
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    extra = f" (and {error.error_count() - 1} more problems)" if error.error_count() > 1 else ""
    return f"{what}: {where}: {message}{extra}"


def yaml_where(exc: Exception) -> str:
    """` at line N` for a YAML error that knows its position, else nothing."""
    mark = getattr(exc, "problem_mark", None)
    return f" at line {mark.line + 1}" if mark is not None else ""
