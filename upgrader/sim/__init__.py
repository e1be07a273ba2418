"""The Kubernetes API emulator: `EmulatedCluster` (cluster.py) assembles the API server and the controllers.
May import: core, sim.apiserver, sim.controllers; the rooms: apiserver <- controllers <- this <- fleets <- proving."""
