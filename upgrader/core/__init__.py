"""Pure decision code: plain data in, plain data out. Imports no API client, retry or metrics library.
May import: itself and plain libraries (transitions, pydantic, PyYAML); no clock, no I/O, nothing above it."""
