"""The fair order: which queued candidate a repository's queue takes next, decided without I/O.

Without it, an agent that pushes twenty changes takes twenty turns of the verifier before one that pushes one.
Within a priority the agents share the verifier by start-time fair queuing (SFQ, Goyal et al. 1996) in predicted
verifier-seconds: deficit round robin's guarantee (two agents with work waiting are served within one quantum of
each other, the quantum being the largest predicted cost) without its rounds, so one statement can take one
candidate at a time (``candidate_next`` in ``mergebot/db/queries/landing.sql`` is this module in SQL, and
``tests/test_fair_queue.py`` holds the two to the same order).

The rules (``rank``, ``take``):
  1. priority is absolute: a higher priority always goes first, whatever anyone has been served;
  2. then a candidate passed over ``max_passes`` times already goes first, the oldest first (the queue's aging,
     as before fairness: it bounds what rules 3, 5 and 6 may reorder);
  3. then the redo of a subtask that lost the most conflicts (its earlier pushes rejected because another landing
     changed the same lines first): its lost turn cost the verifier nothing (a conflict is found by a merge in
     memory), and queued behind fresher pushes on the same file it would lose again and again;
  4. then the candidate whose *tag* is least. Each agent has an account (``Shares.served``): the finish tag of its
     last candidate taken. Each repository has a virtual clock (``Shares.clock``). A candidate's tag is
     ``max(clock, served[its owner])``: an agent with work waiting is served after agents that have been served
     less; an agent that comes back after waiting for nothing starts at the clock, so it has banked no credit
     and owes no debt older than one quantum. A candidate taken before and put back (the window re-planned it)
     keeps the tag it was taken at (``Waiting.start``) and is not charged again;
  5. then the one whose landing unblocks the most subtasks; 6. then, in a risk-aware queue, the least likely to
     fail (unknown counts as the middle);
  7. then arrival.
Taking a candidate that had no tag yet charges its owner its predicted cost: ``served = tag + cost``, with
``cost = run_seconds * (1 + risk)``: one run's predicted verifier-seconds for the repository (``predicted_seconds``:
the median of its newest ``RECENT_RUNS`` finished candidate runs, a run of named checks counting its checks'
seconds summed, ``verifier_seconds``, not its wall time), once more in proportion to how likely it fails (a likely
failure costs a run of its own to be judged apart or bisected out); unknown risk counts as the middle. The
database computes that prediction once (``predicted_run``, migration 0039), and admission control's backlog
(``mergebot.landing.intake.admission``) counts in the same one, so a lane's backlog and an agent's charge agree.
The clock moves up to the least tag waiting (never past a waiting candidate's tag, so no agent with work waiting
loses its place to a higher priority's pick). Every older candidate of the same priority whose tag is no greater
than the taken one's counts one more pass: it was passed over by a tie-breaker or by the aging, not by the fair
share (a candidate whose owner has been served more is not passed over when a less-served agent goes first).

So nothing starves: a waiting candidate's tag does not rise while every other agent's does as it is served; it is
reached after at most one turn of each other agent with work (per quantum), and rule 2 still bounds the others.
The flow is the agent that pushed (``candidates.owner_id``), all of equal weight: the agents of a subtask tree or
a group each have their own share (a tree's root is often the whole project).

``jain_index`` is Jain's fairness index, for benchmarks and tests to measure what this order achieves.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

DEFAULT_RUN_SECONDS = 60.0  # a repository with no finished candidate run yet: every candidate costs the same anyway
RECENT_RUNS = 20  # one run's verifier-seconds are predicted from this many of the repository's newest candidate runs
UNKNOWN_RISK = 0.5  # a candidate with no failure estimate counts as the middle, in its cost as in rule 6


@dataclass(frozen=True)
class Waiting:
    """A queued candidate as the order sees it: one the queue may take now (fenced, its dependencies landed)."""

    id: int
    owner: int
    priority: int = 0
    passed_over: int = 0
    unblocks: int = 0  # blocked subtasks its landing releases
    conflicts_lost: int = 0  # its subtask's earlier candidates rejected for a conflict
    risk: float | None = None  # its estimated failure probability
    start: float | None = None  # the tag it was first taken at (taken before, then put back); None: never taken


@dataclass(frozen=True)
class Shares:
    """A repository's fair state: its virtual clock, and each agent's finish tag (the service it has had)."""

    clock: float = 0.0
    served: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Taken:
    """One decision: the candidate taken, at what tag, what it was charged, the state after, and the ids of the
    candidates it passed over (each counts one more pass)."""

    chosen: Waiting
    tag: float
    charged: float
    shares: Shares
    passed: frozenset[int]


def verifier_seconds(checks: Sequence[float]) -> float:
    """One finished run's verifier-seconds from the seconds each of its checks ran: a single run has one; a run of
    named checks counts every check that ran, since each held a verifier that long, side by side or not (so not the
    group's wall time)."""
    return float(sum(checks))


def predicted_seconds(recent: Sequence[float]) -> float:
    """One candidate run's predicted verifier-seconds for a repository (``predicted_run`` in the database, for the
    fair order's charge and admission control's backlog alike): the median of ``recent``, its candidate runs that
    finished done, newest first (by when they were queued), each counted by ``verifier_seconds``, of which only the
    newest ``RECENT_RUNS`` count; ``DEFAULT_RUN_SECONDS`` when there are none."""
    newest = list(recent)[:RECENT_RUNS]
    return float(statistics.median(newest)) if newest else DEFAULT_RUN_SECONDS


def cost(cand: Waiting, run_seconds: float) -> float:
    """A candidate's predicted verifier-seconds: its run, and in proportion to its failure risk one more."""
    return run_seconds * (1.0 + (UNKNOWN_RISK if cand.risk is None else cand.risk))


def tag(cand: Waiting, shares: Shares) -> float:
    """Rule 3's key: the tag it keeps once taken, else its owner's service, no earlier than the clock."""
    if cand.start is not None:
        return cand.start
    return max(shares.clock, shares.served.get(cand.owner, 0.0))


def rank(cand: Waiting, shares: Shares, *, max_passes: int, risk_aware: bool) -> tuple[float, ...]:
    """The sort key of the queue's order, least first: rules 1 to 7 in turn."""
    aged = cand.passed_over >= max_passes
    risk = (UNKNOWN_RISK if cand.risk is None else cand.risk) if risk_aware else 0.0
    return (-cand.priority, 0 if aged else 1, cand.id if aged else 0, -cand.conflicts_lost, tag(cand, shares),
            -cand.unblocks, risk, cand.id)


def take(queue: Iterable[Waiting], shares: Shares, *, max_passes: int, risk_aware: bool,
         run_seconds: float) -> Taken | None:
    """The candidate the queue takes next, and what taking it changes; None for an empty queue."""
    waiting = list(queue)
    if not waiting:
        return None
    chosen = min(waiting, key=lambda c: rank(c, shares, max_passes=max_passes, risk_aware=risk_aware))
    at = tag(chosen, shares)
    passed = frozenset(o.id for o in waiting
                       if o.id < chosen.id and o.priority == chosen.priority and tag(o, shares) <= at)
    clock = max(shares.clock, min(tag(c, shares) for c in waiting))
    served = dict(shares.served)
    charged = 0.0
    if chosen.start is None:
        charged = cost(chosen, run_seconds)
        served[chosen.owner] = at + charged
    return Taken(chosen, at, charged, Shares(clock, served), passed)


def drain(queue: Iterable[Waiting], shares: Shares | None = None, *, max_passes: int, risk_aware: bool,
          run_seconds: float) -> tuple[list[Taken], Shares, dict[int, int]]:
    """Take every candidate of a queue no one adds to, one after another: the decisions in order, the state after,
    and each candidate's passes then."""
    state = shares or Shares()
    left = {c.id: c for c in queue}
    decisions = []
    while (step := take(left.values(), state, max_passes=max_passes, risk_aware=risk_aware,
                        run_seconds=run_seconds)) is not None:
        decisions.append(step)
        state = step.shares
        del left[step.chosen.id]
        for i in step.passed:
            left[i] = replace(left[i], passed_over=left[i].passed_over + 1)
    return decisions, state, {d.chosen.id: d.chosen.passed_over for d in decisions}


def jain_index(values: Iterable[float]) -> float:
    """Jain's fairness index of what each party received: (sum x)^2 / (n * sum x^2), from 1/n (one party had
    everything) to 1 (all had the same). All zero counts as equal (1). Needs at least one value, none negative."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("jain_index needs at least one value")
    if any(x < 0 for x in xs):
        raise ValueError("jain_index takes no negative values")
    square = sum(x * x for x in xs)
    if square == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * square)
