"""`upgrader plan`: the preflight's report of a rollout, its findings and its waves, and the policy's fit.
May import: core.report, core.model, core.compat, core.policy, core.node, core.fleet, core.rollout."""
