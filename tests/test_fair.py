"""The fair order's rules (``mergebot.landing.window.fair``) without a database, and Jain's fairness index.

The same rules run in SQL (``candidate_next``); ``tests/test_fair_queue.py`` holds the two to one order.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mergebot.landing.window.fair import (
    DEFAULT_RUN_SECONDS,
    RECENT_RUNS,
    Shares,
    Waiting,
    cost,
    drain,
    jain_index,
    predicted_seconds,
    tag,
    take,
    verifier_seconds,
)

RUN = 10.0  # the check's predicted seconds in these tests


def _order(queue: list[Waiting], shares: Shares | None = None, *, max_passes: int = 4,
           risk_aware: bool = True) -> list[int]:
    decisions, _, _ = drain(queue, shares, max_passes=max_passes, risk_aware=risk_aware, run_seconds=RUN)
    return [d.chosen.id for d in decisions]


def test_a_lone_agent_is_not_queued_behind_another_agents_six() -> None:
    queue = [Waiting(id=i, owner=1) for i in range(1, 7)] + [Waiting(id=7, owner=2)]
    order = _order(queue)
    assert order == [1, 7, 2, 3, 4, 5, 6]
    # the lone agent's turn is its share, not a pass of the other agent's older ones: nobody counts a pass
    _, shares, passes = drain(queue, max_passes=4, risk_aware=True, run_seconds=RUN)
    assert set(passes.values()) == {0}
    assert shares.served == {1: 6 * cost(queue[0], RUN), 2: cost(queue[6], RUN)}


def test_two_agents_with_work_alternate_and_arrival_breaks_ties() -> None:
    queue = [Waiting(id=i, owner=1) for i in range(1, 4)] + [Waiting(id=i, owner=2) for i in range(4, 7)]
    assert _order(queue) == [1, 4, 2, 5, 3, 6]


def test_priority_is_absolute_over_the_fair_share() -> None:
    served = Shares(clock=0.0, served={1: 1000.0})  # ann has been served a great deal, bob nothing
    queue = [Waiting(id=1, owner=2, priority=0), Waiting(id=2, owner=1, priority=5), Waiting(id=3, owner=1, priority=5)]
    assert _order(queue, served) == [2, 3, 1]


def test_an_agent_back_from_idle_banks_no_credit_and_a_high_priority_pick_takes_no_ones_place() -> None:
    shares = Shares(clock=100.0, served={1: 5.0, 2: 130.0})
    assert tag(Waiting(id=1, owner=1), shares) == 100.0  # idle since: starts at the clock, not at 5
    assert tag(Waiting(id=2, owner=3), shares) == 100.0  # a new agent too
    assert tag(Waiting(id=3, owner=2), shares) == 130.0
    # bob's high-priority pick at 130 does not move the clock past ann's waiting 100: she keeps her place
    step = take([Waiting(id=4, owner=2, priority=9), Waiting(id=5, owner=1)], shares, max_passes=4,
                risk_aware=True, run_seconds=RUN)
    assert step is not None and step.chosen.id == 4 and step.tag == 130.0
    assert step.shares.clock == 100.0 and step.passed == frozenset()


def test_a_candidate_put_back_keeps_its_tag_and_is_not_charged_again() -> None:
    shares = Shares(clock=50.0, served={1: 80.0, 2: 60.0})
    back = Waiting(id=1, owner=1, start=20.0)  # taken at 20 before; the window re-planned it
    step = take([back, Waiting(id=2, owner=2)], shares, max_passes=4, risk_aware=True, run_seconds=RUN)
    assert step is not None and step.chosen.id == 1 and step.tag == 20.0 and step.charged == 0.0
    assert step.shares.served == shares.served
    assert step.shares.clock == 50.0  # the clock never goes back


def test_tie_breakers_count_passes_and_the_aging_bounds_them() -> None:
    # one agent's three: the safest first, but the riskiest, passed over twice, then goes before the middle one
    queue = [Waiting(id=1, owner=1, risk=0.9), Waiting(id=2, owner=1, risk=0.5), Waiting(id=3, owner=1, risk=0.1),
             Waiting(id=4, owner=1, risk=0.05)]
    decisions, _, passes = drain(queue, max_passes=2, risk_aware=True, run_seconds=RUN)
    assert [d.chosen.id for d in decisions] == [4, 3, 1, 2]
    assert passes == {4: 0, 3: 1, 1: 2, 2: 2}
    # with the estimates off: arrival order, no passes
    assert _order(queue, risk_aware=False) == [1, 2, 3, 4]


def test_a_likely_failure_costs_more_and_a_run_is_predicted_by_the_median_of_recent_ones() -> None:
    assert cost(Waiting(id=1, owner=1, risk=0.0), 10.0) == 10.0
    assert cost(Waiting(id=1, owner=1, risk=1.0), 10.0) == 20.0
    assert cost(Waiting(id=1, owner=1), 10.0) == 15.0  # unknown counts as the middle
    assert predicted_seconds([3.0, 100.0, 4.0]) == 4.0
    assert predicted_seconds([]) == DEFAULT_RUN_SECONDS
    # three named checks of 30 s side by side held the verifiers 90 s, whatever their 30 s of wall time
    assert verifier_seconds([30.0, 30.0, 30.0]) == 90.0
    assert predicted_seconds([10.0, verifier_seconds([30.0, 30.0, 30.0])]) == 50.0
    # only the newest RECENT_RUNS runs (newest first) have a say
    assert predicted_seconds([5.0] * RECENT_RUNS + [1000.0] * RECENT_RUNS) == 5.0


def test_jain_index() -> None:
    assert jain_index([5, 5, 5, 5]) == 1.0
    assert jain_index([1, 0, 0, 0]) == 0.25  # one had everything: 1/n
    assert jain_index([1, 2, 3]) == pytest.approx(36 / 42)
    assert jain_index([0, 0]) == 1.0
    assert jain_index([7]) == 1.0
    with pytest.raises(ValueError):
        jain_index([])
    with pytest.raises(ValueError):
        jain_index([1, -1])


RISKS = st.one_of(st.none(), st.floats(0.0, 1.0))


@st.composite
def queues(draw: st.DrawFn, *, priorities: int, tie_breakers: bool, max_passes: int = 4) -> list[Waiting]:
    """A queue no one adds to: ids in arrival order, a few owners with unequal numbers of candidates."""
    rows = draw(st.lists(st.tuples(st.integers(1, 5), st.integers(0, priorities - 1), RISKS, st.integers(0, 2),
                                   st.integers(0, 1), st.integers(0, max_passes)), min_size=1, max_size=30))
    return [Waiting(id=i + 1, owner=o, priority=p, risk=r, unblocks=u if tie_breakers else 0,
                    conflicts_lost=c if tie_breakers else 0, passed_over=k if tie_breakers else 0)
            for i, (o, p, r, u, c, k) in enumerate(rows)]


@given(queues(priorities=1, tie_breakers=False), st.booleans())
def test_agents_with_work_waiting_are_served_within_one_quantum_of_each_other(queue: list[Waiting],
                                                                              risk_aware: bool) -> None:
    """Equal-weight agents offered unequal numbers of candidates: after every decision, any two agents that still
    have work waiting have had the same predicted verifier-seconds, within the largest single cost (the quantum),
    whatever the risk tie-breaker reorders within an agent's own work."""
    quantum = max(cost(c, RUN) for c in queue)
    decisions, _, _ = drain(queue, max_passes=10**6, risk_aware=risk_aware, run_seconds=RUN)
    left = {c.owner: 0 for c in queue}
    for c in queue:
        left[c.owner] += 1
    got = dict.fromkeys(left, 0.0)
    for step in decisions:
        got[step.chosen.owner] += step.charged
        left[step.chosen.owner] -= 1
        waiting = [got[o] for o, n in left.items() if n > 0]
        if len(waiting) > 1:
            assert max(waiting) - min(waiting) <= quantum + 1e-9, (got, left)


@given(queues(priorities=3, tie_breakers=True), st.integers(0, 4), st.booleans())
def test_priority_is_absolute_and_none_is_passed_over_more_than_max_passes(queue: list[Waiting], max_passes: int,
                                                                           risk_aware: bool) -> None:
    queue = [replace(c, passed_over=min(c.passed_over, max_passes)) for c in queue]
    decisions, shares, passes = drain(queue, max_passes=max_passes, risk_aware=risk_aware, run_seconds=RUN)
    assert sorted(d.chosen.id for d in decisions) == [c.id for c in queue]  # each taken once
    priorities = [d.chosen.priority for d in decisions]
    assert priorities == sorted(priorities, reverse=True)
    assert max(passes.values()) <= max_passes, passes
    # and the clock never passes what was waiting: every decision's tag is at least the clock it started from
    clocks = [Shares().clock] + [d.shares.clock for d in decisions]
    assert clocks == sorted(clocks) and clocks[-1] <= max(d.tag for d in decisions)
    assert set(shares.served) == {c.owner for c in queue}
