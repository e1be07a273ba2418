"""The fleet-level rollout, one pass: detect, steps concluded, starts, waits, status.
May import: core.report, core.model, core.compat, core.policy, core.node, core.fleet."""
