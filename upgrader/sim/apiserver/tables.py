"""Server-side `Table` rendering, so `kubectl get` prints the columns users know."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from upgrader.sim.apiserver.clock import parse_rfc3339

Obj = dict[str, Any]
Column = tuple[str, str, int]  # name, type, priority (1 = only with -o wide)
Cells = Callable[[Obj, float], list[Any]]


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery's duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if rest == 0 else f"{hours // 24 // 365}y{rest}d"
    return f"{hours // 24 // 365}y"


def age(obj: Obj, now: float) -> str:
    created = obj["metadata"].get("creationTimestamp")
    return human_duration(now - parse_rfc3339(created)) if created else "<unknown>"


def _node(obj: Obj, now: float) -> list[Any]:
    conds = {c.get("type"): c.get("status") for c in (obj.get("status") or {}).get("conditions") or []}
    status = "Ready" if conds.get("Ready") == "True" else "NotReady" if conds.get("Ready") else "Unknown"
    if (obj.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = (obj.get("status") or {}).get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in (obj.get("status") or {}).get("addresses") or []}
    return [
        obj["metadata"]["name"],
        status,
        ",".join(roles) or "<none>",
        age(obj, now),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


def pod_status_reason(obj: Obj) -> str:
    """The STATUS column: a waiting/terminated reason beats the phase; Terminating beats both."""
    status = obj.get("status") or {}
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state and state["terminated"].get("reason"):
            reason = state["terminated"]["reason"]
    return str(reason)


def _pod(obj: Obj, now: float) -> list[Any]:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or []) or len(statuses)
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(int(cs.get("restartCount", 0)) for cs in statuses)
    return [
        obj["metadata"]["name"],
        f"{ready}/{total}",
        pod_status_reason(obj),
        restarts,
        age(obj, now),
        (obj.get("status") or {}).get("podIP") or "<none>",
        (obj.get("spec") or {}).get("nodeName") or "<none>",
        "<none>",
        "<none>",
    ]


def _pdb(obj: Obj, now: float) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        _or_na(spec.get("minAvailable")),
        _or_na(spec.get("maxUnavailable")),
        int(status.get("disruptionsAllowed", 0)),
        age(obj, now),
    ]


def _or_na(value: Any) -> str:
    return "N/A" if value is None else str(value)


def _daemonset(obj: Obj, now: float) -> list[Any]:
    st = obj.get("status") or {}
    template = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted((template.get("nodeSelector") or {}).items()))
    containers = template.get("containers") or []
    return [
        obj["metadata"]["name"],
        st.get("desiredNumberScheduled", 0),
        st.get("currentNumberScheduled", 0),
        st.get("numberReady", 0),
        st.get("updatedNumberScheduled", 0),
        st.get("numberAvailable", 0),
        selector or "<none>",
        age(obj, now),
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        ",".join(
            f"{k}={v}"
            for k, v in sorted((((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}).items())
        ),
    ]


def _revision(obj: Obj, now: float) -> list[Any]:
    owner = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    controller = f"{owner['kind'].lower()}.apps/{owner['name']}" if owner else "<none>"
    return [obj["metadata"]["name"], controller, obj.get("revision", 0), age(obj, now)]


def _job(obj: Obj, now: float) -> list[Any]:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    conds = {c.get("type") for c in st.get("conditions") or [] if c.get("status") == "True"}
    state = "Complete" if "Complete" in conds else "Failed" if "Failed" in conds else "Running"
    start, end = st.get("startTime"), st.get("completionTime")
    duration = human_duration((parse_rfc3339(end) if end else now) - parse_rfc3339(start)) if start else ""
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [
        obj["metadata"]["name"],
        state,
        f"{st.get('succeeded', 0)}/{spec.get('completions', 1)}",
        duration,
        age(obj, now),
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
    ]


def _event(obj: Obj, now: float) -> list[Any]:
    # Either group's view of an Event: the server prints both from the one object it stores.
    involved = obj.get("involvedObject") or obj.get("regarding") or {}
    last = (
        obj.get("lastTimestamp")
        or obj.get("deprecatedLastTimestamp")
        or obj.get("eventTime")
        or obj["metadata"].get("creationTimestamp")
    )
    seen = human_duration(now - parse_rfc3339(last)) if last else "<unknown>"
    return [
        seen,
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        obj.get("message") or obj.get("note") or "",
    ]


def _lease(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], (obj.get("spec") or {}).get("holderIdentity") or "", age(obj, now)]


def _namespace(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], (obj.get("status") or {}).get("phase", "Active"), age(obj, now)]


def _configmap(obj: Obj, now: float) -> list[Any]:
    return [
        obj["metadata"]["name"],
        len(obj.get("data") or {}) + len(obj.get("binaryData") or {}),
        age(obj, now),
    ]


def _resource_claim(obj: Obj, now: float) -> list[Any]:
    """STATE as kube's printer writes it: deleted, allocated, reserved, or pending."""
    status = obj.get("status") or {}
    states = [
        word
        for word, present in (
            ("deleted", obj["metadata"].get("deletionTimestamp")),
            ("allocated", status.get("allocation")),
            ("reserved", status.get("reservedFor")),
        )
        if present
    ]
    return [obj["metadata"]["name"], ",".join(states) or "pending", age(obj, now)]


def _default(obj: Obj, now: float) -> list[Any]:
    return [obj["metadata"]["name"], age(obj, now)]


S, N = "string", "integer"
TABLES: dict[str, tuple[list[Column], Cells]] = {
    "Node": (
        [
            ("Name", S, 0),
            ("Status", S, 0),
            ("Roles", S, 0),
            ("Age", S, 0),
            ("Version", S, 0),
            ("Internal-IP", S, 1),
            ("External-IP", S, 1),
            ("OS-Image", S, 1),
            ("Kernel-Version", S, 1),
            ("Container-Runtime", S, 1),
        ],
        _node,
    ),
    "Pod": (
        [
            ("Name", S, 0),
            ("Ready", S, 0),
            ("Status", S, 0),
            ("Restarts", N, 0),
            ("Age", S, 0),
            ("IP", S, 1),
            ("Node", S, 1),
            ("Nominated Node", S, 1),
            ("Readiness Gates", S, 1),
        ],
        _pod,
    ),
    "PodDisruptionBudget": (
        [
            ("Name", S, 0),
            ("Min Available", S, 0),
            ("Max Unavailable", S, 0),
            ("Allowed Disruptions", N, 0),
            ("Age", S, 0),
        ],
        _pdb,
    ),
    "DaemonSet": (
        [
            ("Name", S, 0),
            ("Desired", N, 0),
            ("Current", N, 0),
            ("Ready", N, 0),
            ("Up-to-date", N, 0),
            ("Available", N, 0),
            ("Node Selector", S, 0),
            ("Age", S, 0),
            ("Containers", S, 1),
            ("Images", S, 1),
            ("Selector", S, 1),
        ],
        _daemonset,
    ),
    "ControllerRevision": (
        [("Name", S, 0), ("Controller", S, 0), ("Revision", N, 0), ("Age", S, 0)],
        _revision,
    ),
    "Job": (
        [
            ("Name", S, 0),
            ("Status", S, 0),
            ("Completions", S, 0),
            ("Duration", S, 0),
            ("Age", S, 0),
            ("Containers", S, 1),
            ("Images", S, 1),
        ],
        _job,
    ),
    "Event": (
        [("Last Seen", S, 0), ("Type", S, 0), ("Reason", S, 0), ("Object", S, 0), ("Message", S, 0)],
        _event,
    ),
    "Lease": ([("Name", S, 0), ("Holder", S, 0), ("Age", S, 0)], _lease),
    "Namespace": ([("Name", S, 0), ("Status", S, 0), ("Age", S, 0)], _namespace),
    "ConfigMap": ([("Name", S, 0), ("Data", N, 0), ("Age", S, 0)], _configmap),
    "ResourceClaim": ([("Name", S, 0), ("State", S, 0), ("Age", S, 0)], _resource_claim),
}
DEFAULT_TABLE: tuple[list[Column], Cells] = ([("Name", S, 0), ("Age", S, 0)], _default)


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def render(kind: str, items: list[Obj], now: float, list_meta: Obj, include: str = "Metadata") -> Obj:
    columns, cells = TABLES.get(kind, DEFAULT_TABLE)
    rows = []
    for obj in items:
        row: Obj = {"cells": cells(obj, now)}
        row_obj = row_object(obj, include)
        if row_obj is not None:
            row["object"] = row_obj
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            {
                "name": name,
                "type": ctype,
                "format": "name" if name == "Name" else "",
                "description": name,
                "priority": priority,
            }
            for name, ctype, priority in columns
        ],
        "rows": rows,
    }
