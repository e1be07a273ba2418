"""The kube adapter, the only package that talks to the Kubernetes API: snapshots in, actions out.
May import: core, inputs; it names Addresses, not the controller's Settings."""
