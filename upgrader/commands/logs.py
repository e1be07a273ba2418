"""How `upgrader run` logs: text lines as it always has, or JSON lines for Loki and Elasticsearch.

JSON: one object a line, `time` (RFC 3339, UTC, milliseconds), `level`, `logger`, `message`, and
`node`, `state`, `reason` when the log call carries them (`extra=`, as the controller's per-node
lines do: controller/loop.py). How much: INFO by default; `-v` adds upgrader's DEBUG lines, `-vv`
the libraries' (the Kubernetes client logs whole response bodies at DEBUG).

Standard library only. Like `logging.basicConfig`, nothing is set up when the process has set up
logging already (an embedding program, a test harness): its handlers stay as they are.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

# Light to import (the standard library only, until `log_format` refuses a value): the parser reads
# LOG_FORMATS for every command.
LOG_FORMATS = ("text", "json")
LOG_FORMAT_ENV = "UPGRADER_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(message)s"
FIELDS = ("node", "state", "reason")  # what a log call's `extra=` may add to a JSON line


def log_format(flag: str | None) -> str:
    """`--log-format`, else UPGRADER_LOG_FORMAT, else text; a bad variable is a ConfigError (exit 2)."""
    if flag is not None:
        return flag
    value = os.environ.get(LOG_FORMAT_ENV)
    if value is None or value == "":
        return "text"
    if value not in LOG_FORMATS:
        from upgrader.core.model.input_errors import printable
        from upgrader.inputs import ConfigError

        expected = " or ".join(LOG_FORMATS)
        raise ConfigError(f"settings: {LOG_FORMAT_ENV}={printable(repr(value))}: expected {expected}")
    return value


class JsonFormatter(logging.Formatter):
    """One JSON object a line (newlines in a message are escaped, non-ASCII too)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def configure(log_format: str, verbosity: int = 0, stream: TextIO | None = None) -> None:
    """Log to `stream` (stderr) in `log_format`; `verbosity` is how many `-v` were given."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(log_format))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO)
    if verbosity >= 1:
        logging.getLogger("upgrader").setLevel(logging.DEBUG)
