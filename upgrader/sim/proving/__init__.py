"""Harnesses that run the real controller over the emulator and judge it: invariants, makespan.
May import: core, inputs, kube, controller, sim, sim.apiserver, sim.controllers, sim.fleets; nothing imports it."""
