"""`upgrader promote`: a person lets the rollout past the stage it waits on, a soak
(failureDomains.soakSeconds) or a promotionGate (docs/policy.md#promotion). It promotes what the
controller's status names (`waiting_on.stage` and `finished_at`), written beside the operators' other
intent: the DriverRollout's `spec.promotions` (RBAC: patch on driverrollouts), or the control
ConfigMap's `promoted` under `run --policy`. The controller compares the finish as text, so a later
finish of the same stage is not covered, and no clock of this machine is compared with its own.

It refuses (exit 1, one line, nothing written) when the rollout waits on no stage: paused, halted, a
budget, or a canary that failed, which only `upgrader acknowledge` lets the rollout past (promotion
is not acknowledgement)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from upgrader.commands.control import _settings, _spec, _write
from upgrader.commands.status import Refused, _given, _guarded, find_rollout, read_status, rollout_report

if TYPE_CHECKING:
    from upgrader.kube.api import KubeApi


def promote(args: argparse.Namespace) -> int:
    def change(api: KubeApi) -> int:
        from upgrader.kube.snapshot import PROMOTED_KEY, control_path, parse_acknowledged

        obj = find_rollout(api, args)
        settings = _settings(api, args) if obj is None else None
        if obj is not None:
            status = rollout_report(obj)
        else:
            assert settings is not None
            status = read_status(api, settings, _given(args))
        stage, finished_at = _promotable(status)
        if obj is not None:
            _spec(api, obj, lambda latest: {"promotions": _with(latest, stage, finished_at)})
        elif settings is not None:
            data = (api.get(control_path(settings)) or {}).get("data") or {}
            kept = {**parse_acknowledged(data.get(PROMOTED_KEY)), stage: finished_at}
            _write(api, settings, {PROMOTED_KEY: json.dumps(kept, sort_keys=True)})
        wait = status.get("waiting_on") or {}
        ended = "its soak ends" if wait.get("reason") == "soak" else "the promotion gate opens"
        print(f"promoted {stage} (finished at {finished_at}): {ended}; the next pass goes on")
        return 0

    return _guarded("promote", change, args)


def _promotable(status: dict[str, Any]) -> tuple[str, str]:
    """The stage and finish the status says the rollout waits on; Refused, saying why, otherwise."""
    wait = status.get("waiting_on") or {}
    if wait.get("stage") and wait.get("finished_at"):
        return str(wait["stage"]), str(wait["finished_at"])
    failed = [f["node"] for f in status.get("failed") or [] if not f.get("acknowledged")]
    if failed:
        nodes = " ".join(failed)
        raise Refused(
            f"nothing to promote: {', '.join(failed)} upgrade-failed, not acknowledged; promotion is not "
            f"acknowledgement (`upgrader acknowledge {nodes}` first, nothing written)"
        )
    waiting = f", waiting on {wait['reason']}" if wait.get("reason") else ""
    raise Refused(
        f"nothing to promote: the rollout is {status.get('phase')}{waiting}; promote ends a soak or a "
        "promotionGate wait (nothing written)"
    )


def _with(obj: dict[str, Any], stage: str, finished_at: str) -> list[dict[str, str]]:
    """spec.promotions with `stage` promoted at `finished_at` (one entry a stage: the newest)."""
    listed = (obj.get("spec") or {}).get("promotions") or []
    kept = [p for p in listed if isinstance(p, dict) and p.get("stage") != stage]
    return [*kept, {"stage": stage, "finishedAt": finished_at}]
