"""Pure decisions, in seven rooms that import only the rooms before them: model compat policy node fleet rollout plan.
May import: nothing of upgrader; plain libraries (transitions, pydantic, PyYAML, croniter), no clock, no I/O."""
