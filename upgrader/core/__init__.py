"""Pure decision code: plain data in, plain data out. Imports no API client, retry or metrics library."""
