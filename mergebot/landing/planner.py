"""The speculation planner: what the merge queue does next with its window, decided without I/O.

With W verifier workers, the queue tests the first W candidates at once, each merged on top of the ones ahead
of it (slot k is verified as main + c1 + ... + ck), and lands them in order, each moving main to exactly the
commit that was verified. The window adapts like Zuul's: one wider after a landing, halved after a failure,
never below the floor.

Only the head of the window ever lands or is judged: a failing run behind the head is held until it becomes
the head (its commit is then exactly main + it, so the usual retry and base checks apply to it), but every slot
behind a failing run is cut at once, because it was built on a commit that will not land.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PASSING = frozenset({"pass", "flaky"})


@dataclass(frozen=True)
class Slot:
    candidate_id: int
    outcome: str | None = None  # None while its run is pending; "pass", "flaky", "fail", "timeout", "error"
    valid: bool = True  # False once its candidate was superseded, reclaimed or withdrawn


@dataclass(frozen=True)
class Decision:
    action: str  # "land", "judge_head", "cut", "wait"
    index: int = 0  # "cut": slots from here on are cancelled and go back to the queue


def decide(slots: Sequence[Slot]) -> Decision:
    """The next step for a window, in priority order: drop what cannot land, land or judge the head, cut what
    is built on a failing run, wait. Landing a passing head comes before cutting behind a failure further
    back: the head's landing does not depend on anything behind it, and it must never wait on them."""
    for i, slot in enumerate(slots):
        if not slot.valid:
            return Decision("cut", i)  # it, and everything built on it
    if not slots:
        return Decision("wait")
    head = slots[0].outcome
    if head in PASSING:
        return Decision("land")
    if head is not None:
        return Decision("judge_head")
    for i, slot in enumerate(slots[1:], start=1):
        if slot.outcome is not None and slot.outcome not in PASSING and i + 1 < len(slots):
            return Decision("cut", i + 1)
    return Decision("wait")


def next_width(width: int, *, passed: bool, floor: int = 1, ceiling: int) -> int:
    """Zuul's window: grow by one on success, halve on failure, within [floor, ceiling]."""
    if passed:
        return max(floor, min(ceiling, width + 1))
    return max(floor, min(ceiling, width // 2))


def expected_landings_per_run(width: int, failure_rate: float) -> float:
    """The model bound: landings per check duration for a full window, sum over k=1..W of (1-p)^k."""
    q = 1.0 - failure_rate
    return sum(q**k for k in range(1, width + 1))
