"""The plain data every room shares: cluster views, states, actions, findings, selectors, times.
May import: core.report; plain libraries only (pydantic), no clock, no I/O."""
