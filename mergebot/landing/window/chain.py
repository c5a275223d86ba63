"""The speculation window's records: its slots (``Speculation``), the suspects left out of failed batches
(``Suspect``), and the window itself (``Window``) with what a landing's policy is called.

Plain data with small derived views; ``mergebot.landing.window.executor`` acts on them and
``mergebot.landing.window.planner`` decides from their plans. A slot is one candidate merged onto the slot ahead's merge
(or main); it is a checkpoint while a run of its own covers it and the unchecked slots ahead of it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from mergebot.git import repo as git
from mergebot.landing.judge.step import Judging
from mergebot.landing.window import planner
from mergebot.models import Candidate, Repo
from mergebot.models.judgement import Judged


@dataclass
class Speculation:
    """One slot of the window: a candidate merged onto ``base`` (main, or the slot ahead's merge)."""

    cand: Candidate
    base: str
    merge: git.Merge
    job_id: int | None = None  # this slot's own run (a checkpoint); None while a later checkpoint covers it
    result: Judged | None = None  # its run, judged
    valid: bool = True
    started: float = 0.0  # when its run was queued (event-loop time)
    paths: frozenset[str] = frozenset()  # what the candidate changes on top of its base
    judging: Judging | None = None  # what its run judges: its merge with main's tests (``mergebot.landing.judge``)
    held_job_id: int | None = None  # its passing run's held-out run, while it runs (``judge.heldout``)
    held_for: Judged | None = None  # that passing run, until the held-out run's verdict joins it
    without_suspect: bool = False  # its run is the one on a failed batch without its suspect (a leave-out)
    proven: bool = False  # it passed on main alone after its batch failed (``mergebot.landing.window.apart``)

    @property
    def checkpoint(self) -> bool:
        return self.job_id is not None

    def risk(self, fail_rate: float) -> float:
        """Its estimated failure probability; the window's measured rate when it has none."""
        if self.proven:
            return planner.PROVEN
        return self.cand.failure_risk if self.cand.failure_risk is not None else fail_rate

    def plan(self, fail_rate: float | None = None) -> planner.Slot:
        """As the planner sees it; ``fail_rate`` None: without estimates (a queue that is not risk-aware)."""
        return planner.Slot(self.cand.id, self.result.outcome if self.result else None, self.valid, self.checkpoint,
                            0.0 if fail_rate is None else self.risk(fail_rate))


@dataclass
class Suspect:
    """A failed batch's likeliest culprit, out of the chain while the rest of its batch is verified without it.

    ``slot`` keeps the failed run (``result``) and the paths; ``rest`` is the candidate whose run covers the rest.
    When the rest lands, the suspect sits on main exactly as in the failed run (when its merge there is that tree)
    and is judged on it; when the rest fails or is cut, the culprit may be elsewhere and the suspect is re-planned."""

    slot: Speculation
    rest: int


@dataclass
class Window:
    width: int  # verifier runs in flight at most (Zuul's window)
    ceiling: int = 1  # the widest it may grow (its repository's queue rules: ``Speculator.step`` sets it)
    slots: list[Speculation] = field(default_factory=list)
    fail_rate: float = 0.1  # measured share of candidates that fail their check (sets the batch size)
    deferred: set[int] = field(default_factory=set)  # re-planned after the slots ahead of them (lanes)
    aside: dict[int, tuple[asyncio.Task[None], frozenset[str]]] = field(default_factory=dict)  # judged apart
    suspects: dict[int, Suspect] = field(default_factory=dict)  # left out of a failed batch (planner rule 4a)
    proven: set[int] = field(default_factory=set)  # passed on main alone after their batch failed (rule 4b)
    # The next candidate, taken and merged onto the chain's tail while the runs were busy (``stage``); it has no
    # run until ``fill`` adds it.
    staged: Speculation | None = None
    # Queued candidates known to apply on main ``tried_on``, with the paths each changes (``sweep``): when main
    # moves, only the ones whose paths main's change touches are tried again.
    tried: dict[int, frozenset[str]] = field(default_factory=dict)
    tried_on: str | None = None

    def plan(self, risk_aware: bool) -> list[planner.Slot]:
        """The slots as the planner sees them (with estimates only in a risk-aware queue)."""
        return [s.plan(self.fail_rate if risk_aware else None) for s in self.slots]

    def failing(self) -> bool:
        return any(s.plan().failed for s in self.slots)

    def unchecked(self) -> list[Speculation]:
        """The slots at the chain's tail that no run covers yet (the batch the fill is forming)."""
        return self.slots[max((i + 1 for i, s in enumerate(self.slots) if s.checkpoint), default=0):]

    def busy_paths(self) -> frozenset[str]:
        """What the candidates being judged apart, or left out, change: candidates touching it wait (lanes)."""
        return frozenset().union(*(paths for _, paths in self.aside.values()),
                                 *(s.slot.paths for s in self.suspects.values()))

    def tail(self, start: str) -> str:
        """Where the next slot is merged: on the last slot's merge, or on ``start`` when the chain is empty."""
        tip = self.slots[-1].merge.sha if self.slots else start
        assert tip is not None
        return tip

    def judged(self, cand_id: int) -> None:
        """A candidate judged apart has its verdict: what waited for it (or for anything) is planned again."""
        self.aside.pop(cand_id, None)
        self.deferred.clear()

    def drop(self) -> None:
        """Forget the window (reconcile, lost leadership): its candidates are requeued by the reconciler."""
        for task, _ in self.aside.values():
            task.cancel()
        self.aside.clear()
        self.suspects.clear()
        self.proven.clear()
        self.slots.clear()
        self.deferred.clear()
        self.staged = None
        self.tried.clear()
        self.tried_on = None


def policy(repo: Repo, unit: list[Speculation], *, serial: bool = False) -> str:
    """How the window landed ``unit``, for its landed rows: serial (a window one wide with batches of one) or
    speculative, with ``batched`` when one run covered several, ``risk-aware`` when the estimates shaped it,
    ``left-out`` when it is a failed batch's rest."""
    parts = ["serial" if serial else "speculative", *(["batched"] if len(unit) > 1 else []),
             *(["risk-aware"] if repo.risk_aware else []),
             *(["left-out"] if unit[-1].without_suspect else [])]
    return "+".join(parts)
