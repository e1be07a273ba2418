"""Follow the policy through one reconcile pass: which modules of upgrader/core it enters, how often.

    .venv/bin/python bench/pass_walk.py [--nodes N] [--policy FILE] [--trail]

Runs the controller (`Controller.reconcile`, as `upgrader run` builds it) on an emulated fleet with a
rollout under way: N GPU nodes in 3 zones (default 30), one node in each of four in-progress states.
The first pass writes the status; the second is traced. A module is *entered* when a function in it
is called with the policy as an argument (a `Policy` in its frame's arguments) while no frame of that
module is already on the policy's trail; an entry into a module the trail had entered and left before
is a *return*. A *crossing* is one caller function entering one function of another module: a loop
over the nodes makes the same crossing once a node, counted once among the distinct crossings. Prints
the modules entered, the entries and the returns among them, the distinct crossings and the returns
among those, the same at the level of core's rooms, and with `--trail` the entries in order. Counts
calls, not time: the figures are the same on any machine.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from upgrader.controller.loop import Controller
from upgrader.controller.settings import Settings, load_policy
from upgrader.core.model.states import STATE_LABEL
from upgrader.core.policy.policy import Policy
from upgrader.kube.api import KubeApi
from upgrader.sim.cluster import EmulatedCluster
from upgrader.sim.fleets.largefleet import paused_rollout

CORE = Path(__file__).resolve().parents[1] / "upgrader" / "core"
IN_PROGRESS = ("cordon-required", "wait-for-jobs-required", "pod-deletion-required", "validation-required")


@dataclass
class Trail:
    """The policy's way through the modules, as entries (a module, entered from outside it)."""

    entries: list[str] = field(default_factory=list)
    stack: list[tuple[int, str]] = field(default_factory=list)  # (frame id, module) carrying the policy
    seen: set[str] = field(default_factory=set)
    returns: int = 0
    crossings: dict[tuple[str, str], str] = field(default_factory=dict)  # (from, to function) -> module entered

    def call(self, frame: FrameType, module: str) -> None:
        if module not in (m for _, m in self.stack):
            self.returns += module in self.seen
            self.seen.add(module)
            self.entries.append(module)
            caller = frame.f_back
            where = f"{caller.f_globals['__name__']}.{caller.f_code.co_name}" if caller else "?"
            self.crossings.setdefault((where, f"{frame.f_globals['__name__']}.{frame.f_code.co_name}"), module)
        self.stack.append((id(frame), module))

    def crossing_returns(self) -> int:
        """Distinct crossings (a caller function into a function of another module, however many times
        a loop makes it) into a module an earlier crossing had entered."""
        modules = list(self.crossings.values())
        return len(modules) - len(set(modules))

    def leave(self, frame: FrameType) -> None:
        if self.stack and self.stack[-1][0] == id(frame):
            self.stack.pop()


def carries_policy(frame: FrameType) -> bool:
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return any(isinstance(frame.f_locals.get(n), Policy) for n in names)


def room_of(module: str) -> str:
    """core/<room>/<module>.py's room; a module directly in core/ (a flat core) is in the room "core"."""
    return module.split(".")[0] if "." in module else "core"


def follow(run: Any) -> tuple[Trail, Trail]:
    """The policy's trail through `run`, by module and by room."""
    modules, rooms = Trail(), Trail()
    core = str(CORE)

    def profile(frame: FrameType, event: str, _: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(core) and carries_policy(frame):
            module = frame.f_globals["__name__"].removeprefix("upgrader.core.")
            modules.call(frame, module)
            rooms.call(frame, room_of(module))
        elif event == "return":
            modules.leave(frame)
            rooms.leave(frame)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return modules, rooms


def controller_on_a_fleet(nodes: int, policy: Policy) -> Controller:
    cluster = EmulatedCluster.virtual()
    cluster.load(paused_rollout(nodes))
    cluster.store.delete(cluster.type("configmaps"), "gpu-operator", "gpu-driver-upgrade-status")  # under way
    for i, state in enumerate(IN_PROGRESS):
        cluster.store.mutate(cluster.type("nodes"), None, f"gpu-{i:05d}",
                             lambda node, s=state: node["metadata"]["labels"].__setitem__(STATE_LABEL, s))
    api = KubeApi(cluster.client(), sleep=lambda _: None)
    return Controller(api, policy, Settings(identity="pass-walk"), cluster.store.clock.now)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=inspect.getdoc(sys.modules[__name__]))
    parser.add_argument("--nodes", type=int, default=30)
    parser.add_argument("--policy", type=Path, help="a policy file (default: every default)")
    parser.add_argument("--trail", action="store_true", help="print the entries in order")
    args = parser.parse_args(argv)
    controller = controller_on_a_fleet(args.nodes, load_policy(str(args.policy)) if args.policy else Policy())
    controller.reconcile()  # the first pass writes the status; the second is the one followed
    trail, rooms = follow(controller.reconcile)
    for name, walk in (("modules", trail), ("rooms", rooms)):
        print(f"{name}: {len(walk.seen)} entered; {len(walk.entries)} entries, {walk.returns} of them returns to one "
              f"left; {len(walk.crossings)} distinct crossings, {walk.crossing_returns()} of them returns")
    if args.trail:
        print(" -> ".join(trail.entries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
