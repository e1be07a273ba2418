"""Pure decision code: plain data in, plain data out. Imports no API client, retry or metrics library.
May import: nothing of upgrader; plain libraries only (transitions, pydantic, PyYAML), no clock, no I/O."""
