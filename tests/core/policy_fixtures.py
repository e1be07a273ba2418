"""Shared by the upgrade policy tests: `write` a policy file and `load_error`, its one-line refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from upgrader.controller.settings import load_policy
from upgrader.inputs import ConfigError


def write(tmp_path: Path, text: str, name: str = "policy.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def load_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_policy(path)
    message = str(err.value)
    assert len(message.splitlines()) == 1, message
    assert message.startswith(f"policy {path}: ")
    return message.removeprefix(f"policy {path}: ")
