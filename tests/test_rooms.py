"""Every room of upgrader/ imports only the rooms below it, and no modules import each other in a circle.

The rooms and their arrows are docs/architecture.md's picture; each room's __init__ says the same in its
"May import:" line. Every import counts: module-level, inside a function, and under TYPE_CHECKING (a
type-only import is still a dependency a reader must follow).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.import_walk import PACKAGE, imported, module_name

SIM_ROOMS = ("upgrader.sim.apiserver", "upgrader.sim.controllers", "upgrader.sim", "upgrader.sim.fleets")

# core's rooms, bottom to top: each may import those before it (docs/architecture.md#inside-core).
CORE_ROOMS = tuple(
    f"upgrader.core.{r}" for r in ("report", "model", "compat", "policy", "node", "fleet", "rollout", "plan")
)
CORE_MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "upgrader.core.report": (),
    "upgrader.core.model": CORE_ROOMS[:1],
    "upgrader.core.compat": CORE_ROOMS[:2],
    "upgrader.core.policy": CORE_ROOMS[:3],
    "upgrader.core.node": (*CORE_ROOMS[:2], CORE_ROOMS[3]),  # one node reads the policy, never compatibility
    "upgrader.core.fleet": CORE_ROOMS[:5],
    "upgrader.core.rollout": CORE_ROOMS[:6],
    "upgrader.core.plan": CORE_ROOMS[:7],
}
MOST_MODULES = 12  # a room a newcomer can walk: about a dozen modules at most

# room -> the rooms it may import (besides itself). The top package holds only __version__. A room
# outside core that may import "upgrader.core" may import every room inside it.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "upgrader": (),
    "upgrader.core": (),
    **CORE_MAY_IMPORT,
    "upgrader.inputs": ("upgrader.core",),
    "upgrader.kube": ("upgrader.core", "upgrader.inputs"),
    "upgrader.controller": ("upgrader", "upgrader.core", "upgrader.inputs", "upgrader.kube"),
    "upgrader.sim.apiserver": ("upgrader.core",),
    "upgrader.sim.controllers": ("upgrader.core", "upgrader.sim.apiserver"),
    "upgrader.sim": ("upgrader.core", "upgrader.sim.apiserver", "upgrader.sim.controllers"),
    "upgrader.sim.fleets": ("upgrader.core", *SIM_ROOMS[:3]),
    "upgrader.sim.proving": ("upgrader.core", "upgrader.inputs", "upgrader.kube", "upgrader.controller", *SIM_ROOMS),
    "upgrader.commands": (
        "upgrader", "upgrader.core", "upgrader.inputs", "upgrader.kube", "upgrader.controller", *SIM_ROOMS,
    ),
}
ROOMS = [room for room in MAY_IMPORT if room != "upgrader"]
PACKAGE_ROOMS = [room for room in ROOMS if (PACKAGE.parent / room.replace(".", "/")).is_dir()]  # inputs is one module


def room_of(module: str) -> str | None:
    """The longest room that holds `module` (upgrader.sim.fleets.spread is in upgrader.sim.fleets)."""
    rooms = [r for r in MAY_IMPORT if module == r or module.startswith(r + ".")]
    if module != "upgrader" and rooms == ["upgrader"]:
        return None  # a loose module at the top: no room says what it may import
    return max(rooms, key=len) if rooms else None


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        names = imported(ast.parse(path.read_text(), filename=str(path)), name, path.name == "__init__.py")
        graph[name] = {n for n in names if n.split(".")[0] == "upgrader"}
    return graph


def may_import(room: str, target_room: str | None) -> bool:
    allowed = MAY_IMPORT[room]
    whole_core = "upgrader.core" in allowed and target_room in CORE_ROOMS
    return target_room in allowed or whole_core


def wrong_way(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Every import that goes where its room may not: `module -> target (room may not import other room)`."""
    problems = []
    for module, targets in graph.items():
        room = room_of(module)
        if room is None:
            problems.append(f"{module}: in no room (add it to a room, or a room to MAY_IMPORT and the docs)")
            continue
        for target in sorted(targets):
            target_room = room_of(target)
            if target_room != room and not may_import(room, target_room):
                problems.append(f"{module} -> {target} ({room} may not import {target_room})")
    return problems


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


GRAPH = import_graph()


def test_every_room_is_there_and_holds_modules() -> None:
    for room in ROOMS:
        assert room in GRAPH, f"{room}: in MAY_IMPORT but no such package or module"
        if room in PACKAGE_ROOMS:
            assert any(m.startswith(room + ".") for m in GRAPH), f"{room} holds no module"


def test_core_is_its_rooms_only() -> None:
    """core/ holds rooms, no loose module: each module says by its room what it may import."""
    loose = sorted(m for m in GRAPH if room_of(m) == "upgrader.core" and m != "upgrader.core")
    assert not loose, f"modules in core/ outside its rooms: {loose}"


@pytest.mark.parametrize("room", CORE_ROOMS)
def test_a_core_room_holds_about_a_dozen_modules(room: str) -> None:
    modules = sorted(m for m in GRAPH if room_of(m) == room and m != room)
    assert 0 < len(modules) <= MOST_MODULES, f"{room}: {len(modules)} modules: {modules}"


def said_may_import(doc: str) -> set[str] | None:
    """The rooms a docstring's "May import: core, sim.apiserver; ..." line names (None: no such line)."""
    line = next((ln for ln in doc.splitlines() if ln.startswith("May import:")), None)
    if line is None:
        return None
    items = line.removeprefix("May import:").split(";")[0].rstrip(".").split(",")
    words = [item.split()[0] for item in items if item.split()]
    return {w if w == "upgrader" else f"upgrader.{w}" for w in words if w != "nothing"}


def room_doc(room: str) -> tuple[Path, str]:
    where = PACKAGE.parent / room.replace(".", "/")
    path = where / "__init__.py" if where.is_dir() else where.with_suffix(".py")
    return path, ast.get_docstring(ast.parse(path.read_text())) or ""


@pytest.mark.parametrize("room", ROOMS)
def test_room_says_what_it_may_import_as_the_test_holds_it(room: str) -> None:
    path, doc = room_doc(room)
    if room in PACKAGE_ROOMS:
        lines = doc.splitlines()
        assert len(lines) == 2 and lines[1].startswith("May import:"), f"{path}: two lines, the second 'May import:'"
    assert said_may_import(doc) == set(MAY_IMPORT[room]), f"{path}: its 'May import:' line differs from MAY_IMPORT"


@pytest.mark.parametrize("room", list(MAY_IMPORT))
def test_room_imports_only_the_rooms_below_it(room: str) -> None:
    problems = wrong_way({m: t for m, t in GRAPH.items() if room_of(m) == room})
    assert not problems, "\n".join(problems)


def test_every_package_is_a_room() -> None:
    """A new sub-package gets its own entry (and arrows); it does not fall silently into its parent's room."""
    packages = {module_name(init) for init in PACKAGE.rglob("__init__.py")}
    assert packages <= set(MAY_IMPORT), f"packages that are no room: {sorted(packages - set(MAY_IMPORT))}"


def test_no_module_outside_a_room() -> None:
    loose = [m for m in GRAPH if room_of(m) is None]
    assert not loose, f"modules in no room: {loose}"


def test_no_import_circles() -> None:
    assert not circles(GRAPH), circles(GRAPH)


def test_nothing_in_upgrader_imports_the_commands_or_the_proving_harnesses() -> None:
    for top in ("upgrader.commands", "upgrader.sim.proving"):
        users = sorted(m for m, ts in GRAPH.items() if room_of(m) != top and any(room_of(t) == top for t in ts))
        assert not users, f"{top} is imported by {users}"


def test_the_checks_catch_a_wrong_way_import_and_a_circle() -> None:
    graph = {
        "upgrader.kube.api": {"upgrader.controller.loop"},  # the adapter reaching up to the controller
        "upgrader.sim.apiserver.store": {"upgrader.sim.controllers.jobs"},
        "upgrader.sim.controllers.jobs": {"upgrader.sim.apiserver.store"},
        "upgrader.stray": set(),
    }
    assert wrong_way(graph) == [
        "upgrader.kube.api -> upgrader.controller.loop (upgrader.kube may not import upgrader.controller)",
        "upgrader.sim.apiserver.store -> upgrader.sim.controllers.jobs "
        "(upgrader.sim.apiserver may not import upgrader.sim.controllers)",
        "upgrader.stray: in no room (add it to a room, or a room to MAY_IMPORT and the docs)",
    ]
    assert circles(graph) == [["upgrader.sim.apiserver.store", "upgrader.sim.controllers.jobs"]]
    # inside core: the plain data reaching up to the policy, a node's step to the fleet's rollout
    assert wrong_way({
        "upgrader.core.model.views": {"upgrader.core.policy.alert_gate"},
        "upgrader.core.node.steps": {"upgrader.core.rollout.waits", "upgrader.core.model.actions"},
        "upgrader.inputs": {"upgrader.core.model.input_errors"},  # outside core, "core" is all of it
    }) == [
        "upgrader.core.model.views -> upgrader.core.policy.alert_gate "
        "(upgrader.core.model may not import upgrader.core.policy)",
        "upgrader.core.node.steps -> upgrader.core.rollout.waits "
        "(upgrader.core.node may not import upgrader.core.rollout)",
    ]
    assert wrong_way({"upgrader": {"upgrader.sim.cluster"}}) == [
        "upgrader -> upgrader.sim.cluster (upgrader may not import upgrader.sim)"
    ]


def test_a_may_import_line_is_read_as_rooms() -> None:
    assert said_may_import("x\nMay import: upgrader (its __version__), core, sim.apiserver; not the rest.") == {
        "upgrader", "upgrader.core", "upgrader.sim.apiserver"}
    assert said_may_import("x\nMay import: nothing of upgrader; plain libraries.") == set()
    assert said_may_import("x\nImports: core.") is None


def test_imports_under_type_checking_and_inside_functions_count() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from upgrader.sim.cluster import EmulatedCluster\n"
        "def f():\n    from upgrader.sim.apiserver import errors\n"
    )
    found = imported(ast.parse(source), "upgrader.sim.loading", is_package=False)
    assert found == {"typing", "upgrader.sim.cluster", "upgrader.sim.apiserver.errors"}
