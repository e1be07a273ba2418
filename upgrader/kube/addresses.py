"""Where the adapter finds the driver and keeps upgrader's own objects, as the adapter needs it.

The controller's `Settings` (upgrader/controller/settings.py) has these fields and is what callers pass; the
adapter names only this shape, so it never imports the controller room above it.
"""

from __future__ import annotations

from typing import Protocol


class Addresses(Protocol):
    """Namespaces, selectors and object names the adapter reads and writes at."""

    @property
    def namespace(self) -> str: ...  # the status ConfigMap and the Lease
    @property
    def status_configmap(self) -> str: ...
    @property
    def control_configmap(self) -> str: ...  # the operators' intent: pause, acknowledged failures
    @property
    def driver_namespace(self) -> str: ...
    @property
    def driver_daemonset_selector(self) -> str: ...
    @property
    def driver_pod_selector(self) -> str: ...
    @property
    def event_namespace(self) -> str: ...  # node Events, as kubelet's
    @property
    def identity(self) -> str: ...  # this replica: Events' reportingInstance
