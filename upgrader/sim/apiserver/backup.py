"""An API server that comes back older: a backup of the store.

`EmulatedCluster.backup()` keeps every object and the resourceVersion, as an etcd snapshot does;
`restore_from(backup)` serves them again as an API server restarted on the restored etcd: the
resourceVersions go back below what clients have seen, every watch ends, and a watch resumed
from a newer version gets what `future_watches` says (`watch.FUTURE_WATCHES`; by default
what kube-apiserver does: it holds the watch silently). The kubelets and controllers then carry on
from the restored objects: resume.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Backup:
    """Every stored object by (group, plural) and key, and the resourceVersion it was taken at."""

    resource_version: int
    objects: dict[tuple[str, str], dict[tuple[str, str], Obj]]

    def count(self) -> int:
        return sum(len(bucket) for bucket in self.objects.values())
