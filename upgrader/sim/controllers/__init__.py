"""What the cluster does on its own: kubelet, pod placement, DaemonSets and the driver, Jobs, workloads, PDB status.
May import: core, sim.apiserver; they act through the store, as real controllers through the API."""
