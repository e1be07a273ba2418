"""What a module imports, read from its source: one walker for tests/test_layering.py and tests/test_rooms.py.

Every import counts, those inside functions and under TYPE_CHECKING too; relative imports are resolved.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "upgrader"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module `tree` (the source of `module`) imports; `from pkg import mod` names the module
    when it is one of upgrader's, else `pkg` (`from kubernetes import client` is `kubernetes`)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                out.add(candidate if _is_upgrader_module(candidate) else base)
    return out


def _is_upgrader_module(name: str) -> bool:
    if name.split(".")[0] != "upgrader":
        return False
    where = PACKAGE.parent / name.replace(".", "/")
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()
