"""The fleet: which nodes are managed, in which pool, what the preflight says of each, what budgets allow.
May import: core.report, core.model, core.compat, core.policy, core.node."""
