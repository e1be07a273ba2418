"""The kube adapter, the only package that talks to the Kubernetes API: snapshots in, actions out.
May import: upgrader.core, upgrader.inputs and itself; it names Addresses, not the controller's Settings."""
