"""The emulated API server: store, listing, watch, patch, tables, discovery, eviction, errors, transports.
May import: core; nothing of the cluster's controllers, the fleets or the controller."""
