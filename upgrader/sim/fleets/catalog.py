"""What the CLI offers of the emulated fleets, without building one: the scenario names, the zones
and the default size. Kept apart from `scenarios` so that `upgrader plan` and `run` parse their
flags without importing the emulator (0.4 s of a plan's start-up)."""

from __future__ import annotations

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
DEFAULT_NODES = 6
# The keys of scenarios.SCENARIOS, in its order (tests/sim/test_label_validation.py holds them equal).
SCENARIO_NAMES = ("healthy", "pdb-blocked", "stuck-job", "missing-image", "validation-failure")
