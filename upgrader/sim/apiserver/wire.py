"""Fields the real API server always sends, even when empty.

The API server serialises Go structs: a field without `omitempty` is on the wire even when it
holds its zero value, and the official Python client's models treat such fields as required (a
`V1ContainerStatus` without `imageID` does not deserialise). Objects seeded into the emulator
often leave them out, so every stored object gets them filled in as Go would.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

_CONTAINER_STATUS = {"name": "", "image": "", "imageID": "", "ready": False, "restartCount": 0}
_NODE_INFO = {
    "machineID": "",
    "systemUUID": "",
    "bootID": "",
    "kernelVersion": "",
    "osImage": "",
    "containerRuntimeVersion": "",
    "kubeletVersion": "",
    "kubeProxyVersion": "",
    "operatingSystem": "",
    "architecture": "",
}
_CONTAINER_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


def _defaults(target: Any, defaults: Obj) -> None:
    if isinstance(target, dict):
        for key, value in defaults.items():
            target.setdefault(key, value)


def fill_wire_defaults(kind: str, obj: Obj) -> None:
    """Add the zero values a real server would serialise; changes `obj` in place."""
    status = obj.get("status")
    if not isinstance(status, dict):
        return
    if kind == "Pod":
        for field in _CONTAINER_STATUS_LISTS:
            for cs in status.get(field) or []:
                _defaults(cs, _CONTAINER_STATUS)
    elif kind == "Node" and "nodeInfo" in status:
        _defaults(status["nodeInfo"], _NODE_INFO)
