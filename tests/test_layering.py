"""The decision core stays pure: no API client, retries, metrics, emulator, adapter, file reading or clock reads.

Which room may import which is tests/test_rooms.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.import_walk import PACKAGE, imported, module_name

CORE = PACKAGE / "core"
FORBIDDEN_MODULES = ("kubernetes", "tenacity", "prometheus_client", "urllib3", "requests",
                     "upgrader.kube", "upgrader.sim", "upgrader.controller", "upgrader.commands",
                     "upgrader.inputs", "time", "threading", "subprocess", "socket")
FORBIDDEN_CALLS = ("datetime.now", "datetime.utcnow", "date.today", "time.time", "time.monotonic")


def _calls(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if isinstance(node.func.value, ast.Name):
                out.append(f"{node.func.value.id}.{node.func.attr}")
            elif isinstance(node.func.value, ast.Attribute):
                out.append(f"{node.func.value.attr}.{node.func.attr}")
    return out


CORE_FILES = sorted(CORE.rglob("*.py"))


def test_core_has_modules() -> None:
    assert CORE_FILES, "upgrader/core has no modules to check"


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.relative_to(CORE).as_posix())
def test_core_module_is_pure(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = imported(tree, module_name(path), path.name == "__init__.py")
    bad = sorted(m for m in names for f in FORBIDDEN_MODULES if m == f or m.startswith(f + "."))
    assert not bad, f"{path.name} imports {bad}: core must stay pure"
    clock_reads = [c for c in _calls(tree) if c in FORBIDDEN_CALLS]
    assert not clock_reads, f"{path.name} reads the clock ({clock_reads}); take `now` as an argument"


def test_the_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    tree = ast.parse("import kubernetes.client\nfrom tenacity import retry\nx = datetime.now()\n")
    names = imported(tree, "upgrader.core.example", is_package=False)
    assert "kubernetes.client" in names and "tenacity" in names
    assert "datetime.now" in _calls(tree)
