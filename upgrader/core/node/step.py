"""What one node's state does in a pass, as plain data: the Step its state decides, and what blocks it."""

from __future__ import annotations

from dataclasses import dataclass, field

from upgrader.core.model.actions import Action
from upgrader.core.model.states import STATE_SINCE
from upgrader.core.model.views import PdbView
from upgrader.core.report.kinds import BlockKind


@dataclass(frozen=True)
class Blocked:
    """Something outside upgrader stops the node: a PDB, jobs, pods it may not delete."""

    kind: BlockKind
    reason: str


@dataclass
class Step:
    """What one node's state does this pass, decided before anything is applied: the attempts, the
    trigger they fire, or what blocks or keeps the node waiting, and the timeout that counts.
    rollout/stepping.py concludes it once the attempts are applied."""

    node: str
    kind: BlockKind | None = None  # what a wait past its timeout blocks as (the eviction and job steps)
    attempts: list[Action] = field(default_factory=list)  # all tried, in order
    trigger: str | None = None  # fired when every attempt succeeded
    blocked: Blocked | None = None  # known from the snapshot, before acting
    waiting: str | None = None  # a normal wait (driver coming up, validation pending)
    timeout: int = 0  # seconds this state may last; 0 = no limit
    fail_on_timeout: bool = False  # restart/validation: a timeout fails the node
    clock: str = STATE_SINCE  # the annotation the timeout counts from
    stamp_on_success: str | None = None  # annotation set to `now` when the attempts succeed
    pdb_of: dict[str, PdbView] = field(default_factory=dict)  # evicted pod key -> its PDB
    fallback: str | None = None  # trigger fired when the step cannot finish (past its timeout)
    hopeless: bool = False  # `blocked` can never clear by waiting: take the fallback at once
    clock_lost: str | None = None  # why the node's clock is not its state's (see `lost_clock`)
    returning: bool = False  # evicted pods keep coming back: the evictions are not news each pass
