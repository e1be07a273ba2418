"""The Kubernetes API emulator: `EmulatedCluster` (cluster.py) assembles the API server and the controllers.
May import: upgrader.core; rooms apiserver <- controllers <- this assembly <- fleets <- proving (see each)."""
