"""Bad input from a user, and reading the files a user names with bounds.

Every input error is one of these exceptions, whose message is the one line a user sees; the CLI
prints it and exits 2. Shared by the kube adapter (kubeconfig), the controller (policy) and the
commands (flags, profiles, ledgers, cluster dumps).

May import: core.
"""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from upgrader.core.model.input_errors import yaml_where


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class ConfigError(Exception):
    """Unusable input (policy file, settings, flags); the message is the one line a user sees."""


class ClientConfigError(ConfigError):
    """The kubeconfig or in-cluster configuration cannot be used; the message says why."""


# ----- bounded input files ------------------------------------------------------------------------
# Every file a user hands us is read with a size bound before it is parsed, and YAML with a nesting
# bound, so a huge or deeply nested file is one line and exit 2, not minutes of work, gigabytes of
# memory or a RecursionError. Real files are far below them: a policy is under 2 KiB, a kubectl
# List of 5,000 nodes and 150,000 pods about 150 MiB. Policies, profiles and kubeconfigs are read by
# the pure-Python YAML parser (about 5 s per MiB), hence their small bounds.
MIB = 2**20
POLICY_MAX_BYTES = 1 * MIB  # what a ConfigMap can hold, where a deployed policy comes from
PROFILES_MAX_BYTES = 1 * MIB  # thousands of profiles
KUBECONFIG_MAX_BYTES = 4 * MIB  # about a thousand clusters with their certificates
LEDGER_MAX_BYTES = 16 * MIB  # plain lines: about 300,000 image tags
FROM_FILE_MAX_MIB = 512  # default of UPGRADER_FROM_FILE_MAX_MIB; parsing takes about 7x in memory
YAML_MAX_DEPTH = 64  # policies, profiles and kubeconfigs nest under 10 levels


def read_bounded(path: str | Path, what: str, limit: int, hint: str = "") -> bytes:
    """The file's bytes; ConfigError (`<what>: ...`) when it cannot be read or holds more than `limit`."""
    try:
        with open(path, "rb") as file:
            info = os.fstat(file.fileno())
            # A regular file is refused by its size, unread; a pipe by reading one byte past the bound.
            sized = stat.S_ISREG(info.st_mode) and info.st_size > limit
            raw = b"" if sized else file.read(limit + 1)
    except IsADirectoryError:
        raise ConfigError(f"{what}: is a directory") from None
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read: {exc.strerror or exc}") from None
    if sized or len(raw) > limit:
        size = f" ({info.st_size:,} bytes)" if sized else ""
        raise ConfigError(f"{what}: larger than the limit of {_size(limit)}{size}{'; ' + hint if hint else ''}")
    return raw


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n:,} bytes"


class YamlTooDeep(yaml.YAMLError):
    def __init__(self, mark: yaml.Mark) -> None:
        super().__init__(f"nested deeper than {YAML_MAX_DEPTH} levels")
        self.problem_mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting past YAML_MAX_DEPTH: its composer recurses per level."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > YAML_MAX_DEPTH:
                raise YamlTooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str, what: str) -> Any:
    """`yaml.safe_load` with the nesting bound; ConfigError naming `what` and the line."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader: no arbitrary objects
    except YamlTooDeep as exc:
        raise ConfigError(f"{what}: {exc}{yaml_where(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what}: not valid YAML{yaml_where(exc)}") from None


# ----- decoding large inputs ----------------------------------------------------------------------
@contextmanager
def collector_paused() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector while a pass or a plan reads and works on the cluster.

    Decoding every node and pod allocates millions of dicts, lists and strings, and the collector,
    triggered by allocation counts, would trace the growing heap over and over: about a third of a
    pass's CPU time at 5,000 nodes, and two thirds of `plan --from-file`'s wall time (bench/README.md).
    Parsed JSON and the views made from it hold no reference cycles, so reference counting frees
    them all the same; the collector resumes afterwards.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
