"""Harnesses that run the real controller over the emulator and judge it: invariants, makespan.
May import: every emulator room, and upgrader.core, .kube and .controller above them; nothing imports it."""
