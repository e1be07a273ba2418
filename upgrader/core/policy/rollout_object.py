"""The DriverRollout object (deploy/crd.yaml) as plain data: its spec read as intent (a policy, a
pause, acknowledged failures), and the status the controller writes on it, conditions included, as
the Kubernetes API conventions write them (docs/policy.md#the-rollout-object)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError

from upgrader.core.model.input_errors import one_line, printable
from upgrader.core.policy.policy import Policy, policy_from_mapping
from upgrader.core.report.document import RolloutStatus, to_dict

GROUP = "gpu-upgrader.io"
VERSION = "v1alpha1"
KIND = "DriverRollout"
PLURAL = "driverrollouts"
RESOURCE = f"{PLURAL}.{GROUP}"
INTENT_KEYS = ("paused", "acknowledgedFailures", "promotions")  # beside the policy keys in spec
CONDITION_TYPES = ("Valid", "Paused", "Halted", "Progressing", "Complete")


def object_name(name: str) -> str:
    """How a message names the object, as kubectl does: `driverrollout.gpu-upgrader.io/<name>`."""
    return f"{KIND.lower()}.{GROUP}/{name}"


@dataclass(frozen=True)
class Intent:
    """What one generation of the spec says: the policy (None when the spec is refused, with why),
    the pause and the acknowledged failures (node -> failed-at)."""

    generation: int
    policy: Policy | None
    problem: str | None = None
    paused: bool = False
    acknowledged: Mapping[str, str] = field(default_factory=dict)
    promoted: Mapping[str, str] = field(default_factory=dict)  # stage -> its finish (core/rollout/stages.py)


def read_intent(name: str, obj: Mapping[str, Any]) -> Intent:
    """The object's spec judged as `upgrader run --policy` judges a policy file, in one line naming
    the field (`driverrollout.gpu-upgrader.io/default: spec.failureDomains.canary: ...`)."""
    meta = obj.get("metadata") or {}
    generation = int(meta.get("generation") or 0)
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        return Intent(generation, None, f"{object_name(name)}: spec: must be a mapping")
    paused = spec.get("paused") is True
    acknowledged = {
        str(a.get("node")): str(a.get("failedAt"))
        for a in spec.get("acknowledgedFailures") or ()
        if isinstance(a, Mapping) and isinstance(a.get("node"), str) and isinstance(a.get("failedAt"), str)
    }
    promoted = {
        str(p.get("stage")): str(p.get("finishedAt"))
        for p in spec.get("promotions") or ()
        if isinstance(p, Mapping) and isinstance(p.get("stage"), str) and isinstance(p.get("finishedAt"), str)
    }
    keys = {k: v for k, v in spec.items() if k not in INTENT_KEYS}
    try:
        policy = policy_from_mapping(keys)
    except ValidationError as exc:
        return Intent(generation, None, one_line(exc, f"{object_name(name)}: spec"), paused, acknowledged, promoted)
    except ValueError as exc:
        problem = f"{object_name(name)}: spec: {printable(str(exc))}"
        return Intent(generation, None, problem, paused, acknowledged, promoted)
    return Intent(generation, policy, None, paused, acknowledged, promoted)


def policy_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The policy keys of a spec (what `status.specInForce` keeps), without the pause and acks."""
    return {k: v for k, v in spec.items() if k not in INTENT_KEYS}


@dataclass(frozen=True)
class Verdict:
    """What the controller made of the spec: the generation in force, and why a newer one is not."""

    observed: int  # the newest generation read
    in_force: int | None  # the generation whose policy is acted on (None: none ever was valid; 0: a deleted object's)
    problem: str | None = None  # why `observed` is not in force


@dataclass(frozen=True)
class Writer:
    """Who writes the status: the controller's version, its Lease and this replica."""

    version: str
    lease: str
    holder: str


def object_status(
    report: RolloutStatus | None,
    verdict: Verdict,
    writer: Writer,
    previous: Mapping[str, Any],
    spec_in_force: Mapping[str, Any] | None,
    judged_at: str,
) -> dict[str, Any]:
    """The object's status from a pass's report (core/rollout/status.py's; None when no spec was ever
    valid: nothing is judged), `previous` the status it has, `judged_at` the pass's time."""
    stamp = report.updated_at if report is not None else judged_at
    phase = "Invalid" if verdict.in_force is None or report is None else report.phase.value
    by_state = {k: v for k, v in report.nodes_by_state.items() if v} if report is not None else {}
    total = report.nodes_total if report is not None else 0
    done = int(by_state.get("upgrade-done", 0))
    blocked = [{k: v for k, v in asdict(b).items() if v} for b in report.blocked] if report is not None else []
    message = verdict.problem if verdict.in_force is None or report is None else report.message
    out: dict[str, Any] = {
        "observedGeneration": verdict.observed,
        "phase": phase,
        "message": message,
        "progress": f"{done}/{total}",
        "nodesTotal": total,
        "nodesDone": done,
        "nodesByState": by_state,
        "blockedCount": len(blocked),
        "blocked": blocked,
        "leaseHolder": writer.holder,
        "lease": writer.lease,
        "controllerVersion": writer.version,
        "updatedAt": stamp,
        "conditions": conditions(phase, report, verdict, previous.get("conditions") or (), stamp),
        # What `upgrader status` reads back: the report as the status ConfigMap holds it.
        "report": to_dict(report) if report is not None else {"phase": phase, "message": message, "updated_at": stamp},
    }
    wait = _waiting_on(report) if report is not None else {}
    if wait:
        out["waitingOn"] = wait
    for name, own, of_pool in (
        ("currentDomain", report.current_domain if report else None, lambda p: p.current_domain),
        ("nextDomain", report.next_domain if report else None, lambda p: p.next_domain),
    ):
        if own:
            out[name] = own
        elif report is not None and report.pools:  # each pool's, `<pool>:<domain>`, for `kubectl get dro`'s DOMAIN
            named = [f"{p.name}:{of_pool(p)}" for p in report.pools if of_pool(p)]
            if named:
                out[name] = ", ".join(named)
    if spec_in_force is not None and verdict.in_force is not None:
        out["specInForce"] = dict(spec_in_force)
        out["specInForceGeneration"] = verdict.in_force
    return out


def _waiting_on(report: RolloutStatus) -> dict[str, str]:
    wait = report.waiting_on
    if wait is None:
        return {}
    out = {
        "reason": wait.reason.value,
        "domain": wait.domain or "",
        "until": wait.until or "",
        "since": report.waiting_since or "",
        "runbook": wait.runbook or "",
        "stage": wait.stage or "",
        "finishedAt": wait.finished_at or "",
    }
    return {k: v for k, v in out.items() if v}


def conditions(
    phase: str, report: RolloutStatus | None, verdict: Verdict, previous: Any, now: str
) -> list[dict[str, Any]]:
    """Valid, Paused, Halted, Progressing, Complete; a condition's lastTransitionTime moves only
    when its status does (the one `previous` holds is kept otherwise). `now`: the pass's time."""
    message = report.message if report is not None else ""
    halt_reason = report.halt_reason if report is not None else None
    valid = (
        ("True", "SpecAccepted", f"generation {verdict.observed} is in force")
        if verdict.problem is None
        else (
            "False",
            "SpecRefused",
            verdict.problem
            + (
                f"; generation {verdict.in_force} stays in force"
                if verdict.in_force
                # 0: the object was created again; the spec in force is the deleted object's
                else "; the spec of the object deleted before this one stays in force" if verdict.in_force == 0
                else "; no valid spec yet: nothing is started"
            ),
        )
    )
    acting = verdict.in_force is not None
    states = {
        "Valid": valid,
        "Paused": ("True", "Paused", message) if acting and phase == "Paused" else ("False", "NotPaused", ""),
        # Paused over a halt is both: a pause does not end what blocks (conditions are independent).
        "Halted": ("True", "Halted", str(halt_reason or message))
        if acting and (phase == "Halted" or (phase == "Paused" and halt_reason))
        else ("False", "NotHalted", ""),
        "Progressing": ("True", "Waiting" if report is not None and report.waiting_on else "Rolling", message)
        if acting and phase == "Running"
        else ("False", phase or "Unknown", message if acting else str(verdict.problem)),
        "Complete": ("True", "AllNodesUpgraded", message)
        if acting and phase == "Done"
        else ("False", "NodesToUpgrade", ""),
    }
    before = {str(c.get("type")): c for c in previous if isinstance(c, Mapping)}
    out = []
    for kind in CONDITION_TYPES:
        status, reason, text = states[kind]
        old = before.get(kind) or {}
        since = str(old.get("lastTransitionTime") or now) if old.get("status") == status else now
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": text,
                "lastTransitionTime": since,
                "observedGeneration": verdict.observed,
            }
        )
    return out


def settled(status: Mapping[str, Any]) -> dict[str, Any]:
    """What of a status is worth a write: all but the stamps that move every pass."""
    out = {k: v for k, v in status.items() if k not in ("updatedAt", "report")}
    report = status.get("report")
    if isinstance(report, Mapping):
        out["report"] = {k: v for k, v in report.items() if k != "updated_at"}
    return out
