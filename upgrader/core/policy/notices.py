"""What people are told, and where: the policy's `notifications` (webhooks, each with a generic JSON
or a Slack-compatible body) and the notices a pass gives, judged from the status written before it
and the one it writes: the rollout halted, the canary done, a promotion awaited, a node failed, the
rollout done. Each is given once, when the status first says it; a controller that restarts compares
with the status it finds, so it does not give them again. The sending (retried, off the pass) is the
controller's (controller/notifier.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from upgrader.core.report.document import LastStatus, RolloutStatus
from upgrader.core.report.entries import DomainCount
from upgrader.core.report.kinds import Phase, WaitReason


class NoticeKind(StrEnum):
    HALTED = "halted"
    CANARY_DONE = "canaryDone"
    AWAITING_PROMOTION = "awaitingPromotion"
    FAILED = "failed"
    DONE = "done"


class BodyFormat(StrEnum):
    GENERIC = "generic"  # {"kind", "rollout", "text", "phase", "at", ...}
    SLACK = "slack"  # {"text": ...}: a Slack incoming webhook, or any that takes its shape


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Webhook(_Strict):
    """One receiver: its URL, or a file holding it (a mounted Secret: a Slack URL is a credential)."""

    url: str | None = None
    url_file: str | None = Field(None, alias="urlFile")
    format: BodyFormat = BodyFormat.GENERIC
    events: tuple[NoticeKind, ...] = tuple(NoticeKind)

    @field_validator("url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and (urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc):
            raise ValueError(f"must be an http:// or https:// URL, got {url!r}")
        return url

    @model_validator(mode="after")
    def _one_source(self) -> Webhook:
        if (self.url is None) == (self.url_file is None):
            raise ValueError("give url or urlFile (one of them)")
        return self


class Notifications(_Strict):
    webhooks: tuple[Webhook, ...] = ()


@dataclass(frozen=True)
class Notice:
    kind: NoticeKind
    text: str
    node: str | None = None

    def body(self, rollout: str, status: RolloutStatus, fmt: BodyFormat) -> dict[str, Any]:
        """The JSON a webhook receives."""
        line = f"[{rollout}] {self.text}"
        if fmt is BodyFormat.SLACK:
            return {"text": line}
        return {
            "kind": self.kind.value,
            "rollout": rollout,
            "text": self.text,
            "node": self.node,
            "phase": status.phase.value,
            "progress": f"{status.nodes_by_state.get('upgrade-done', 0)}/{status.nodes_total}",
            "current_domain": status.current_domain,
            "at": status.updated_at,
        }


def staged_canary(policy: Any, status: LastStatus) -> bool:
    """Whether the canary is its domain's first nodes: failureDomains.canaryNodes fewer than the
    canary domain holds (as many or more is the whole domain, core/policy/parts.py `canary_count`)."""
    canary = _canary_domain(status)
    size = canary.nodes if canary is not None else 0
    return size > 0 and policy.failure_domains.canary_count(size) is not None


def notices(
    previous: RolloutStatus | None, status: RolloutStatus, staged_canary: bool,
    pools_staged: Mapping[str, bool] | None = None,
) -> list[Notice]:
    """What the move from `previous` to `status` tells people. `staged_canary`: the canary is the
    canary domain's first nodes (failureDomains.canaryNodes), done when their soak or promotion
    wait begins, rather than the whole domain. With pools (`status.pools`), each pool's canary and
    promotion waits are told, named by pool, `pools_staged` saying which pools' canaries are staged."""
    pooled = bool(status.pools)
    middle = _pooled(previous, status, pools_staged or {}) if pooled else _staged(previous, status, staged_canary)
    done = status.phase is Phase.DONE and previous is not None and previous.phase is not Phase.DONE
    return [*_whole(previous, status), *middle, *([Notice(NoticeKind.DONE, status.message)] if done else [])]


def _whole(previous: RolloutStatus | None, status: RolloutStatus) -> list[Notice]:
    """The halt and the failures: the whole rollout's."""
    out: list[Notice] = []
    before = previous.phase if previous is not None else None
    if status.phase is Phase.HALTED and before is not Phase.HALTED and not status.pools:  # with pools: each pool's
        out.append(Notice(NoticeKind.HALTED, status.message))
    seen = {(f.node, f.since) for f in previous.failed} if previous is not None else set()
    for failure in status.failed:
        if (failure.node, failure.since) not in seen:
            out.append(Notice(NoticeKind.FAILED, f"{failure.node} upgrade-failed: {failure.reason}", failure.node))
    return out


def _staged(previous: LastStatus | None, status: LastStatus, staged: bool, pool: str = "") -> list[Notice]:
    """The canary's end and a promotion wait, of the rollout or (`pool`) of one pool's entries."""
    out = _canary(previous, status, staged)
    wait, waited = status.waiting_on, previous.waiting_on if previous is not None else None
    if wait is not None and wait.reason is WaitReason.AWAITING_PROMOTION and (
        waited is None or (waited.reason, waited.stage) != (WaitReason.AWAITING_PROMOTION, wait.stage)
    ):
        out.append(Notice(NoticeKind.AWAITING_PROMOTION, status.message))
    return [Notice(n.kind, f"pool {pool}: {n.text}", n.node) for n in out] if pool else out


def _pooled(previous: RolloutStatus | None, status: RolloutStatus, staged: Mapping[str, bool]) -> list[Notice]:
    out: list[Notice] = []
    for entry in status.pools or ():
        was = previous.pool(entry.name) if previous is not None else None
        halted = entry.phase is Phase.HALTED and (was is None or was.phase is not Phase.HALTED)
        if halted and status.phase is not Phase.PAUSED:
            out.append(Notice(NoticeKind.HALTED, f"pool {entry.name}: {entry.message}"))
        out += _staged(was, entry, staged.get(entry.name, False), entry.name)
    return out


def _canary(previous: LastStatus | None, status: LastStatus, staged: bool) -> list[Notice]:
    waited = previous.waiting_on if previous is not None else None
    if staged:
        stage = (status.waiting_on.stage if status.waiting_on else None) or ""
        if stage.endswith("/canaryNodes") and (waited.stage if waited else None) != stage:
            domain = stage.removesuffix("/canaryNodes").rpartition(":")[2]  # a pool's: `<pool>:<domain>`
            return [Notice(NoticeKind.CANARY_DONE, f"the canary nodes of {domain} are done")]
        return []
    now, then = _canary_domain(status), _canary_domain(previous)
    if now is not None and now.done == now.nodes and now.nodes and (then is None or then.done != then.nodes):
        return [Notice(NoticeKind.CANARY_DONE, f"the canary domain {now.name} is done: {now.done} nodes")]
    return []


def _canary_domain(status: LastStatus | None) -> DomainCount | None:
    first = status.domains[0] if status is not None and status.domains else None
    return first if first is not None and first.canary else None
