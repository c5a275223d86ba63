"""The speculation planner: what the merge queue does next with its window, decided without I/O.

The window is a chain of merges: slot k is main + c1 + ... + ck. A verifier run on slot k (a *checkpoint*)
covers every slot up to k. With W verifier workers the queue keeps up to W checkpoints running at once
(speculation, as Zuul); with a batch size B > 1 only every B-th slot is a checkpoint, so one run covers B
candidates (batching, as bors), and a failing batch is bisected.

The rules, in order (``decide``):
  0. while main is red only a fix lands, one candidate at a time, judged against main itself (``alone``): the
     executor re-plans whatever the window holds and takes the next candidate alone;
  1. a withdrawn slot (superseded, reclaimed) is cut, with everything built on it;
  2. the furthest passing checkpoint with no failing checkpoint ahead of it lands every slot up to it, by one
     move of main to exactly the commit that run passed on (a later pass covers an earlier pending run);
  3. everything behind a failing checkpoint is cut: it was built on a commit that will not land;
  4. a failing head unit is judged alone when it holds one candidate — apart, while the window refills without it
     (``judge_head``), or, in a serial window (one wide, batches of one: the serial queue), in its place (``alone``:
     one candidate at a time, retried, compared with main, then landed, rejected or parked) — else bisected
     (bors): new checkpoints inside it, as many as there are free verifier workers, spread evenly by the
     candidates' estimated failure probability (``risk``; by count when none is known), so a batch of B with B-1
     free workers finds its culprit in one run's time instead of log2(B) runs one after another; a checkpoint that
     passes inside it lands its prefix at once (rule 2);
  4a. but when the slots carry estimates (a risk-aware queue) and one of them carries more than half the stretch's
     failure mass, that likeliest culprit is left out first (Zuul re-speculates so after a failure): it leaves
     the chain, and the rest of its stretch gets a checkpoint of its own, so the window goes on filling behind
     the rest instead of waiting for a bisection. A candidate failing alone behind a run still pending is left
     out the same way, with that run as its rest (no new run). The executor (``mergebot.landing.window.executor``) keeps
     the suspect with its failed run: if the rest lands, the suspect sits on the very tree that failed and is
     judged on it;
  4b. when the estimates name no clear culprit (at a uniform rate, a batch of two fails as often by its first as by
     its last), speculating behind a guess throws its runs away as often as not. The whole stretch leaves the
     chain instead and each of its candidates is judged apart, on main alone, while the window fills on with the
     queue: the culprit is rejected on its own run, the others go back to the queue as having passed
     (``PROVEN``) and land in a later batch. ``python -m bench.fleet.window_model`` measures the three against
     each other;
  5. otherwise wait. A tail without a checkpoint gets one (the executor never leaves slots uncovered).
The window adapts like Zuul's: one wider after a landing, halved after a failure, never below the floor. The
floor follows the measured failure rate p: the deepest slot k whose run is still more likely to land than to be
thrown away, (1-p)^k >= 1/2 (``window_floor``). So a rare failure costs no speculation depth (at p = 0.1 a run
six deep still lands with probability 0.53), while at p = 0.3 a failure halves the window down to one. Each
decision carries the width it leaves (``Sizing``, ``resize``): the executor sets it and computes none.
The fill forms batches as ``batching`` says: by count (``batch_size``), or in a risk-aware queue while a batch
stays likely to pass (``joins``); the chain's unchecked tail gets its run when it is full or holds a likely
failure (``closes``). A serial window (one wide, batches of one: the serial queue) is this planner at W = B = 1.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

PASSING = frozenset({"pass", "flaky"})
MIN_PASS = 0.7  # a batch expected to fail more than three times in ten is not formed (see ``pass_threshold``)
CLEAR_SHARE = 0.5  # a failed stretch's suspect is left out (rule 4a) when it carries more than this share of its mass
PROVEN = 0.01  # the estimate of a candidate that passed on main alone after its batch failed (rule 4b)


@dataclass(frozen=True)
class Slot:
    candidate_id: int
    outcome: str | None = None  # a checkpoint's run: None while pending; "pass", "flaky", "fail", "timeout", "error"
    valid: bool = True  # False once its candidate was superseded, reclaimed or withdrawn
    checkpoint: bool = True  # a verifier run covers this slot (and the unchecked slots ahead of it)
    risk: float = 0.0  # its estimated failure probability (``mergebot.landing.intake.risk``); 0 when unknown

    @property
    def failed(self) -> bool:
        return self.checkpoint and self.outcome is not None and self.outcome not in PASSING

    @property
    def passed(self) -> bool:
        return self.checkpoint and self.outcome in PASSING


@dataclass(frozen=True)
class Sizing:
    """What the window's width follows: its width now, the widest it may be, and the measured failure rate."""

    width: int
    ceiling: int
    fail_rate: float = 0.1


@dataclass(frozen=True)
class Decision:
    action: str  # "land", "judge_head", "alone", "cut", "checkpoint", "leave_out", "apart", "wait"
    index: int = 0  # "land": slots up to here; "cut": from here on; "checkpoint": run the check on this slot;
    # "alone": the failed head judged in its place, or (no failed head: main is red) the next candidate taken alone;
    # "leave_out": the suspect, taken out of the chain (the rest of its stretch gets a checkpoint at its end);
    # "apart": the failed stretch, from here to the end, leaves the chain and each of its slots is judged alone
    more: tuple[int, ...] = ()  # "checkpoint" while bisecting: these slots too
    width: int | None = None  # the window's width once this step is carried out (``resize``); None: unchanged.
    # "land": once the unit landed (a landing that does not happen is a failure: ``resize(..., passed=False)``)


def decide(slots: Sequence[Slot], free: int = 1, clear_share: float = CLEAR_SHARE, *, red: bool = False,
           serial: bool = False, sizing: Sizing | None = None) -> Decision:
    """The next step for a window (see the module's rules), with ``free`` verifier runs to spare for a bisection;
    ``clear_share``: the share of a failed stretch's mass its suspect must exceed to be left out (rule 4a; at 0 a
    suspect is always left out, at 1 never: ``python -m bench.fleet.window_model`` compares them); ``red``: main is
    red (rule 0); ``serial``: the window is one wide with batches of one (rule 4: a failed head judged in its place);
    ``sizing``: the window's width now, with which the decision carries its new width (``resize``): one wider after
    a landing, smaller after a failure (a cut behind a failed run, a failed head judged, a suspect left out, a
    stretch judged apart), unchanged otherwise (so is a red main's step: it is not the window's failure).
    Landing a passing unit comes before cutting behind a failure further back: its landing does not depend on
    anything behind it, and it must never wait."""
    decision = _decide(slots, free, clear_share, red=red, serial=serial)
    if sizing is None:
        return decision
    if decision.action == "land":
        return replace(decision, width=resize(sizing, passed=True))
    failed = decision.action in ("judge_head", "leave_out", "apart") or (decision.action == "alone" and not red) or (
        decision.action == "cut" and decision.index > 0 and slots[decision.index - 1].failed)
    return replace(decision, width=resize(sizing, passed=False)) if failed else decision


def resize(sizing: Sizing, *, passed: bool) -> int:
    """The window's width after a landing (``passed``) or a failure: ``next_width`` within [``window_floor``, the
    ceiling]."""
    return next_width(sizing.width, passed=passed, ceiling=sizing.ceiling,
                      floor=window_floor(sizing.fail_rate, sizing.ceiling))


def _decide(slots: Sequence[Slot], free: int = 1, clear_share: float = CLEAR_SHARE, *, red: bool = False,
            serial: bool = False) -> Decision:
    """The module's rules, in order (``decide`` adds the width)."""
    if red:
        return Decision("alone")
    for i, slot in enumerate(slots):
        if not slot.valid:
            return Decision("cut", i)  # it, and everything built on it
    if not slots:
        return Decision("wait")
    land = None
    for i, slot in enumerate(slots):
        if slot.failed:
            break
        if slot.passed:
            land = i
    if land is not None:
        return Decision("land", land)
    for i, slot in enumerate(slots):
        if slot.failed and i + 1 < len(slots):
            return Decision("cut", i + 1)
    failed = next((i for i, s in enumerate(slots) if s.failed), None)
    if failed == 0:
        return Decision("alone" if serial else "judge_head")
    if failed is not None:  # the last slot (rule 3 cut what was behind it), with pending runs or none ahead
        if (suspect := leave_out(slots, failed, free, clear_share)) is not None:
            return suspect
        points = bisection(slots, failed, free)
        return Decision("checkpoint", points[0], points[1:]) if points else Decision("wait")
    if not slots[-1].checkpoint:
        return Decision("checkpoint", len(slots) - 1)
    return Decision("wait")


def bisection(slots: Sequence[Slot], failed: int, free: int) -> tuple[int, ...]:
    """Up to ``free`` new checkpoints ahead of the failing one, the culprit's stretch. Each stretch of unchecked
    slots between the runs ahead of it, first to last, is split into parts of equal failure mass (the slots'
    ``risk``; equal counts when none is known): one point splits it where the culprit is as likely before as
    after."""
    bounds = [-1, *(i for i in range(failed) if slots[i].checkpoint), failed]
    points: list[int] = []
    for lo, hi in itertools.pairwise(bounds):
        k = min(max(0, free - len(points)), hi - lo - 1)
        mass = [slots[i].risk for i in range(lo + 1, hi + 1)]
        if sum(mass) <= 0 or len(set(mass)) == 1:
            mass = [1.0] * (hi - lo)
        total, upto = sum(mass), list(itertools.accumulate(mass))
        for m in range(k):
            goal = total * (m + 1) / (k + 1)  # the first slot whose prefix holds this share of the mass
            point = lo + 1 + min(range(len(upto) - 1), key=lambda j: (abs(upto[j] - goal), j))
            if lo < point < hi and point not in points:
                points.append(point)
    return tuple(sorted(points))


def leave_out(slots: Sequence[Slot], failed: int, free: int, clear_share: float = CLEAR_SHARE) -> Decision | None:
    """Rules 4a and 4b, when the slots carry estimates: the failed stretch's clear culprit (more than half its failure
    mass) left out when a worker is free for the rest's run, or else the stretch judged apart; None to bisect instead
    (no estimates)."""
    lo = max((i for i in range(failed) if slots[i].checkpoint), default=-1)
    stretch = range(lo + 1, failed + 1)
    risks = [slots[i].risk for i in stretch]
    if max(risks) <= 0:
        return None
    if len(stretch) == 1:  # failing alone behind a run still pending: out of the chain, judged once that run lands
        return Decision("leave_out", failed) if lo >= 0 else None
    suspect = max(stretch, key=lambda i: (slots[i].risk, i))
    if slots[suspect].risk <= clear_share * sum(risks):  # never at 0: the suspect's estimate is above 0
        return Decision("apart", lo + 1)  # no clear culprit; its runs on main queue beside the window's
    return Decision("leave_out", suspect) if free >= 1 else None


@dataclass(frozen=True)
class Batching:
    """How the fill forms batches (``mergebot.landing.window.executor``): ``size`` candidates at most under one run, and
    in a risk-aware queue ``least``, the least probability of passing a batch may have (None: batches by count)."""

    size: int
    least: float | None = None


def batching(failure_rate: float, ceiling: int, width: int, risk_aware: bool) -> Batching:
    """The fill's batches at the measured failure rate: by count, ``batch_size`` (at the widest window: one halved by
    failures would make batches look cheap when failures are frequent); risk-aware, up to ``ceiling`` while the batch
    stays at least ``pass_threshold`` likely to pass."""
    if risk_aware:
        return Batching(ceiling, pass_threshold(failure_rate, ceiling, width))
    return Batching(batch_size(failure_rate, ceiling, width))


def joins(batch: Sequence[float], risk: float, rule: Batching) -> bool:
    """Whether a candidate of estimated failure probability ``risk`` may join the batch of unchecked slots at the
    chain's tail (``batch``: theirs): always by count; risk-aware, while the batch stays ``rule.least`` likely to pass
    (else that batch gets its run first, and the candidate starts the next one)."""
    if rule.least is None or not batch:
        return True
    passes = 1.0 - risk
    for other in batch:
        passes *= 1.0 - other
    return passes >= rule.least


def closes(batch: Sequence[float], rule: Batching) -> bool:
    """Whether the chain's unchecked tail (``batch``: its estimates, the slot just added last) gets its run now: a full
    batch does, and in a risk-aware queue so does a likely failure (it runs alone)."""
    if rule.least is not None and 1.0 - batch[-1] < rule.least:
        return True
    return len(batch) >= rule.size


def pass_threshold(failure_rate: float, ceiling: int, width: int = 1) -> float:
    """The least probability of passing a batch may have (``mergebot.landing.window.executor`` adds candidates to a
    batch while it stays above): that of the best batch of equal candidates at the measured failure rate
    (``batch_size``), and never below ``MIN_PASS``. A candidate less likely to pass than this runs alone."""
    q = 1.0 - failure_rate
    return max(MIN_PASS, q ** batch_size(failure_rate, ceiling, width))


def next_width(width: int, *, passed: bool, floor: int = 1, ceiling: int) -> int:
    """Zuul's window: grow by one on success, halve on failure, within [floor, ceiling]."""
    if passed:
        return max(floor, min(ceiling, width + 1))
    return max(floor, min(ceiling, width // 2))


def window_floor(failure_rate: float, ceiling: int) -> int:
    """The deepest window, up to ``ceiling``, whose last run is still at least as likely to land as to be thrown
    away: the largest k with (1-p)^k >= 1/2, and never below 1."""
    q = 1.0 - failure_rate
    k = 1
    while k < ceiling and q ** (k + 1) >= 0.5:
        k += 1
    return k


def expected_landings_per_run(width: int, failure_rate: float) -> float:
    """The model bound: landings per check duration for a full window, sum over k=1..W of (1-p)^k."""
    q = 1.0 - failure_rate
    return sum(q**k for k in range(1, width + 1))


def bisection_rounds(size: int, width: int) -> int:
    """Check durations a bisection of a failing batch of ``size`` takes with ``width`` runs at once: each round
    splits the culprit's stretch into width + 1 parts (``bisection``)."""
    rounds, reach = 0, 1
    while reach < size:
        rounds, reach = rounds + 1, reach * (max(1, width) + 1)
    return rounds


def batch_rate(size: int, width: int, failure_rate: float) -> float:
    """Expected landings per check duration with ``width`` runs in flight, each covering ``size`` more candidates.

    A full window covers width·size candidates, and lands those ahead of the first failure, sum over
    k=1..width·size of (1-p)^k (the model bound, ``expected_landings_per_run``, for size 1). When one of them
    fails, which happens with probability 1-(1-p)^(width·size), a batch must be bisected before the queue goes on:
    ``bisection_rounds`` more check durations, none for a single candidate (it is judged on its own run).
    """
    q = 1.0 - failure_rate
    depth = max(1, width) * max(1, size)
    landed = sum(q**k for k in range(1, depth + 1))
    return landed / (1.0 + (1.0 - q**depth) * bisection_rounds(size, width))


def batch_size(failure_rate: float, ceiling: int, width: int = 1) -> int:
    """The batch size in [1, ceiling] with the most expected landings per check duration (``batch_rate``) at the
    measured failure rate and the window's width: batching pays only while failures are rare, and less the
    deeper the window already speculates."""
    return max(range(1, max(1, ceiling) + 1), key=lambda b: (round(batch_rate(b, width, failure_rate), 9), -b))


def observe_failure(rate: float, failed: bool, weight: float = 0.05) -> float:
    """The measured failure rate, a moving average over candidates' verdicts (about the last twenty)."""
    return (1.0 - weight) * rate + weight * (1.0 if failed else 0.0)
