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
from upgrader.core.report.kinds import WaitReason

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
        stage, finished_at = _promotable(status, getattr(args, "pool", None))
        if obj is not None:
            _spec(api, obj, lambda latest: {"promotions": _with(latest, stage, finished_at)})
        elif settings is not None:
            data = (api.get(control_path(settings)) or {}).get("data") or {}
            kept = {**parse_acknowledged(data.get(PROMOTED_KEY)), stage: finished_at}
            _write(api, settings, {PROMOTED_KEY: json.dumps(kept, sort_keys=True)})
        wait = _waits(status, getattr(args, "pool", None))
        ended = "its soak ends" if wait.get("reason") == WaitReason.SOAK else "the promotion gate opens"
        print(f"promoted {stage} (finished at {finished_at}): {ended}; the next pass goes on")
        return 0

    return _guarded("promote", change, args)


def _waits(status: dict[str, Any], pool: str | None) -> dict[str, Any]:
    """What the rollout, or with pools the pool, waits on; Refused when it cannot be told which.
    Without --pool, the one pool that waits on a stage is the one promoted."""
    pools = status.get("pools") or []
    if not pools:
        if pool is not None:
            raise Refused(f"nothing to promote in pool {pool}: the policy has no pools (nothing written)")
        return dict(status.get("waiting_on") or {})
    names = [str(p.get("name")) for p in pools]
    if pool is not None:
        if pool not in names:
            raise Refused(f"no pool {pool} in the rollout (pools: {', '.join(names)}; nothing written)")
        return dict(next(p for p in pools if p.get("name") == pool).get("waiting_on") or {})
    staged = [p for p in pools if (p.get("waiting_on") or {}).get("stage")]
    if len(staged) > 1:
        which = ", ".join(str(p["name"]) for p in staged)
        raise Refused(f"pools {which} each wait on a stage: say which with --pool (nothing written)")
    return dict(staged[0]["waiting_on"]) if staged else dict(status.get("waiting_on") or {})


def _promotable(status: dict[str, Any], pool: str | None = None) -> tuple[str, str]:
    """The stage and finish the status says the rollout waits on; Refused, saying why, otherwise."""
    wait = _waits(status, pool)
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
