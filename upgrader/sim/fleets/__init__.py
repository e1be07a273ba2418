"""Fleets and scenarios to run against: node, driver and workload builders, named scenarios, large and spread fleets.
May import: core, sim, sim.apiserver, sim.controllers."""
