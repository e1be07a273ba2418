"""The emulated API server: store, listing, watch, patch, tables, discovery, eviction, errors, transports.
May import: upgrader.core and itself; nothing of the cluster's controllers, fleets or the controller."""
