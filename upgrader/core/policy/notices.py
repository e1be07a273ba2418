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

from upgrader.core.model.kinds import WaitReason


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

    def body(self, rollout: str, status: Mapping[str, Any], fmt: BodyFormat) -> dict[str, Any]:
        """The JSON a webhook receives."""
        line = f"[{rollout}] {self.text}"
        if fmt is BodyFormat.SLACK:
            return {"text": line}
        return {
            "kind": self.kind.value,
            "rollout": rollout,
            "text": self.text,
            "node": self.node,
            "phase": status.get("phase"),
            "progress": f"{(status.get('nodes_by_state') or {}).get('upgrade-done', 0)}/{status.get('nodes_total', 0)}",
            "current_domain": status.get("current_domain"),
            "at": status.get("updated_at"),
        }


def staged_canary(policy: Any, status: Mapping[str, Any]) -> bool:
    """Whether the canary is its domain's first nodes: failureDomains.canaryNodes fewer than the
    canary domain holds (as many or more is the whole domain, core/policy/parts.py `canary_count`)."""
    canary = _canary_domain(status)
    size = int(canary["nodes"]) if canary is not None and canary.get("nodes") else 0
    return size > 0 and policy.failure_domains.canary_count(size) is not None


def notices(
    previous: Mapping[str, Any], status: Mapping[str, Any], staged_canary: bool,
    pools_staged: Mapping[str, bool] | None = None,
) -> list[Notice]:
    """What the move from `previous` to `status` tells people. `staged_canary`: the canary is the
    canary domain's first nodes (failureDomains.canaryNodes), done when their soak or promotion
    wait begins, rather than the whole domain. With pools (`status["pools"]`), each pool's canary and
    promotion waits are told, named by pool, `pools_staged` saying which pools' canaries are staged."""
    if status.get("pools"):
        middle = _pooled(previous, status, pools_staged or {})
    else:
        middle = _staged(previous, status, staged_canary)
    done = status.get("phase") == "Done" and previous.get("phase") not in ("Done", None)
    return [*_whole(previous, status), *middle, *([Notice(NoticeKind.DONE, str(status.get("message", "")))]
                                                  if done else [])]


def _whole(previous: Mapping[str, Any], status: Mapping[str, Any]) -> list[Notice]:
    """The halt and the failures: the whole rollout's."""
    out: list[Notice] = []
    phase, before = status.get("phase"), previous.get("phase")
    if phase == "Halted" and before != "Halted" and not status.get("pools"):  # with pools: each pool's halt
        out.append(Notice(NoticeKind.HALTED, str(status.get("message", ""))))
    seen = {(f.get("node"), f.get("since")) for f in previous.get("failed") or () if isinstance(f, Mapping)}
    for failure in status.get("failed") or ():
        if isinstance(failure, Mapping) and (failure.get("node"), failure.get("since")) not in seen:
            node = str(failure.get("node"))
            out.append(Notice(NoticeKind.FAILED, f"{node} upgrade-failed: {failure.get('reason', '')}", node))
    return out


def _staged(previous: Mapping[str, Any], status: Mapping[str, Any], staged: bool, pool: str = "") -> list[Notice]:
    """The canary's end and a promotion wait, of the rollout or (`pool`) of one pool's entries."""
    out = _canary(previous, status, staged)
    wait, waited = status.get("waiting_on") or {}, previous.get("waiting_on") or {}
    if wait.get("reason") == WaitReason.AWAITING_PROMOTION and (waited.get("reason"), waited.get("stage")) != (
        WaitReason.AWAITING_PROMOTION, wait.get("stage")
    ):
        out.append(Notice(NoticeKind.AWAITING_PROMOTION, str(status.get("message", ""))))
    return [Notice(n.kind, f"pool {pool}: {n.text}", n.node) for n in out] if pool else out


def _pooled(previous: Mapping[str, Any], status: Mapping[str, Any], staged: Mapping[str, bool]) -> list[Notice]:
    before = {str(p.get("name")): p for p in previous.get("pools") or () if isinstance(p, Mapping)}
    out: list[Notice] = []
    for entry in status.get("pools") or ():
        if isinstance(entry, Mapping):
            name = str(entry.get("name"))
            was = before.get(name, {})
            if entry.get("phase") == "Halted" and was.get("phase") != "Halted" and status.get("phase") != "Paused":
                out.append(Notice(NoticeKind.HALTED, f"pool {name}: {entry.get('message', '')}"))
            out += _staged(was, entry, staged.get(name, False), name)
    return out


def _canary(previous: Mapping[str, Any], status: Mapping[str, Any], staged: bool) -> list[Notice]:
    if staged:
        stage = str((status.get("waiting_on") or {}).get("stage") or "")
        if stage.endswith("/canaryNodes") and (previous.get("waiting_on") or {}).get("stage") != stage:
            domain = stage.removesuffix("/canaryNodes").rpartition(":")[2]  # a pool's: `<pool>:<domain>`
            return [Notice(NoticeKind.CANARY_DONE, f"the canary nodes of {domain} are done")]
        return []
    now, then = _canary_domain(status), _canary_domain(previous)
    if now is not None and now["done"] == now["nodes"] and now["nodes"] and (
        then is None or then["done"] != then["nodes"]
    ):
        return [Notice(NoticeKind.CANARY_DONE, f"the canary domain {now['name']} is done: {now['done']} nodes")]
    return []


def _canary_domain(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    domains = status.get("domains") or []
    first = domains[0] if domains and isinstance(domains[0], Mapping) else None
    return first if first is not None and first.get("canary") else None
