"""The per-budget eviction backoff as plain data: read back from the status fail-closed (unreadable is
no backoff), reset when the budget's disruptionsAllowed moves, doubled once a pass, capped."""

from __future__ import annotations

from upgrader.core.fleet import eviction_backoff as backoff
from upgrader.core.model.actions import Evict, Outcome, Result
from upgrader.core.model.selectors import parse_label_selector
from upgrader.core.model.views import PdbView
from upgrader.core.report.document import RolloutStatus, read_status

PDB = PdbView("ml", "train", parse_label_selector("app=train"), 0, 2, 2, 2)
E1, E2 = Evict("n1", "ml", "train-0", "u0"), Evict("n2", "ml", "train-1", "u1")
PDB_OF = {"ml/train-0": PDB, "ml/train-1": PDB}


def stored(backoff_kept: object) -> RolloutStatus | None:
    """A status as the cluster holds it, read back as the controller reads it."""
    return read_status({"phase": "Running", "message": "rolling", "eviction_backoff": backoff_kept})


def test_unreadable_backoff_is_none() -> None:
    assert backoff.read(stored({"ml/train": {"refusals": "3"}, "x": 5})) == {}
    assert backoff.read(stored("nonsense")) == {}
    assert backoff.read(None) == {}
    kept = {"refusals": 2, "allowed": 0, "retry_at": "2023-11-14T22:13:20Z"}  # healthy: not yet kept then
    assert backoff.read(stored({"ml/train": kept, "x": 5})) == {"ml/train": backoff.Pause(2, 0, 1700000000.0, -1)}


def test_refusals_double_once_a_pass_up_to_the_cap_and_an_admitted_eviction_ends_it() -> None:
    pauses: dict[str, backoff.Pause] = {}
    now = 1000.0
    delays = []
    for _ in range(7):
        counted: set[str] = set()
        refused = [Outcome(E1, Result.BLOCKED, "429"), Outcome(E2, Result.BLOCKED, "429")]
        pauses = backoff.after(pauses, PDB_OF, refused, now, counted)
        delays.append(pauses["ml/train"].retry_at - now)
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert backoff.after(pauses, PDB_OF, [Outcome(E1, Result.OK)], now, set()) == {}


def test_held_evictions_count_as_refused_until_the_time_or_a_change_of_the_budget() -> None:
    pauses = {"ml/train": backoff.Pause(2, 0, 1020.0, 2)}
    send, held = backoff.hold([E1], PDB_OF, pauses, 1019.0)
    assert send == [] and [o.result for o in held] == [Result.BLOCKED]
    assert held[0].message == ("not sent: PodDisruptionBudget ml/train refused 2 in a row at disruptionsAllowed=0; "
                               "next try at 1970-01-01T00:17:00Z or when disruptionsAllowed changes")
    assert backoff.hold([E1], PDB_OF, pauses, 1020.0) == ([E1], [])
    moved = PdbView("ml", "train", parse_label_selector("app=train"), 1, 2, 1, 2)
    assert backoff.current(pauses, [moved]) == {} and backoff.current(pauses, [PDB]) == pauses


def test_a_budget_this_pass_spent_is_tried_again_and_one_healthy_again_is_reset() -> None:
    refused = [Outcome(E1, Result.BLOCKED, "429")]
    assert backoff.after({}, PDB_OF, refused, 1000.0, set(), disrupted={"ml/train"}) == {}, "this pass spent it"
    down = PdbView("ml", "train", parse_label_selector("app=train"), 0, 1, 2, 2)  # one pod down
    pauses = backoff.after({}, {"ml/train-0": down}, refused, 1000.0, set())
    assert backoff.current(pauses, [down]) == pauses
    assert backoff.current(pauses, [PDB]) == {}, "its pod back: currentHealthy moved, tried again"
