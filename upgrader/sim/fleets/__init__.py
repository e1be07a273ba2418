"""Fleets and scenarios to run against: node, driver and workload builders, named scenarios, large and spread fleets.
May import: upgrader.core, sim.apiserver, sim.controllers, the assembled cluster (upgrader.sim.*) and itself."""
