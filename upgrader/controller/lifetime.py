"""`upgrader run`'s first and last log lines, and the Lease given up on the way out."""

from __future__ import annotations

import logging
from types import TracebackType

from upgrader import __version__
from upgrader.controller.loop import Controller
from upgrader.inputs import ConfigError
from upgrader.kube.leader import LeaderElector

log = logging.getLogger("upgrader")


class Elector(LeaderElector):
    """The LeaderElector whose release says what it did, for `run`'s last line (`released`)."""

    released: str | None = None  # what the last release did: "released", "not held", or why not

    def release(self) -> None:
        before = self._updates()
        super().release()
        ok, _, failed = (after - was for after, was in zip(self._updates(), before, strict=True))
        if ok:
            self.released = "released"
        elif failed:  # the release's write went unanswered or was refused (LeaderElector.release keeps quiet)
            self.released = (
                f"not released (the API server did not take the release): another replica takes it once it "
                f"expires, within {self.duration:g} s"
            )
        else:  # never taken, or taken by another replica since (a 409, then its holder read)
            self.released = "not held"

    def _updates(self) -> tuple[int, int, int]:
        """This elector's Lease writes so far: answered OK, refused with a conflict, failed otherwise."""
        counts = self.api.stats.counts
        ok = counts.get(("update", "ok"), 0)
        conflicts = counts.get(("update", "409"), 0)
        total = sum(n for (verb, _), n in counts.items() if verb == "update")
        return ok, conflicts, total - ok - conflicts


class Lifetime:
    """`run`'s first and last lines: what it runs with, and why it stopped and what became of the Lease.

    A `with` block from the controller's start: on leaving it the Lease is released (when still
    held) and the last line says why it stopped (`why`, or the exception leaving the block).
    `intent`: where the rollout's intent comes from (`policy file <path>`, `default policy`, ...).
    """

    def __init__(self, controller: Controller, intent: str, once: bool = False) -> None:
        self.controller = controller
        self.intent = intent
        self.once = once
        self.why: str | None = None

    def lease(self) -> str:
        settings = self.controller.settings
        return f"Lease {settings.namespace}/{settings.lease_name}"

    def __enter__(self) -> Lifetime:
        settings = self.controller.settings
        if self.controller.elector is not None:
            lease = f"{self.lease()} as {settings.identity}"
        else:
            lease = f"no Lease (--no-leader-election), as {settings.identity}"
        log.info(
            "upgrader %s starting%s: namespace %s, intent from %s, %s",
            __version__,
            " one pass (--once)" if self.once else "",
            settings.namespace,
            self.intent,
            lease,
        )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and self.why is None:
            if isinstance(exc, ConfigError):
                self.why = f"refused to start: {exc}"
            elif isinstance(exc, KeyboardInterrupt):
                self.why = "interrupted"
            else:
                self.why = f"failed: {type(exc).__name__}: {exc}"
        log.info("stopped (%s): %s", self.why or "done", self.release())

    def release(self) -> str:
        """Give the Lease up if still held (`Controller.run` gives it up when its loop ends); what became of it."""
        elector = self.controller.elector
        if elector is None:
            return "no Lease (--no-leader-election)"
        if elector.renewed_at is not None:
            elector.release()
        said = elector.released if isinstance(elector, Elector) else None
        return f"{self.lease()} {said or 'not held'}"
