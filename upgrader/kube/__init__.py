"""The only package that talks to the Kubernetes API: snapshots in, actions out."""
