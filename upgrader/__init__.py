"""upgrader: a rolling GPU driver upgrade controller for Kubernetes."""

__version__ = "0.1.0"
