"""The speculation planner on its own: pure decisions, checked case by case and by property."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mergebot.landing.window.planner import (
    Batching,
    Decision,
    Sizing,
    Slot,
    batch_rate,
    batch_size,
    batching,
    bisection,
    bisection_rounds,
    closes,
    decide,
    expected_landings_per_run,
    joins,
    next_width,
    observe_failure,
    pass_threshold,
    resize,
    window_floor,
)


def test_an_empty_window_waits() -> None:
    assert decide([]) == Decision("wait")


def test_a_passing_head_lands_and_a_failing_head_is_judged() -> None:
    assert decide([Slot(1, "pass"), Slot(2)]) == Decision("land", 0)
    assert decide([Slot(1, "flaky")]) == Decision("land", 0)
    assert decide([Slot(1, "fail")]) == Decision("judge_head")
    assert decide([Slot(1, "error")]) == Decision("judge_head")
    assert decide([Slot(1), Slot(2)]) == Decision("wait")


def test_while_main_is_red_one_candidate_is_judged_alone_against_main() -> None:
    """Rule 0: red main is a decision of the planner, not another engine: whatever the window holds (a pass, a
    failure, pending runs) the step is one candidate judged against main itself."""
    for slots in ([], [Slot(1)], [Slot(1, "pass")], [Slot(1, "fail"), Slot(2)], [Slot(1, valid=False)]):
        assert decide(slots, red=True) == Decision("alone"), slots
        assert decide(slots, red=True, serial=True) == Decision("alone"), slots


def test_a_serial_window_judges_its_failed_head_in_its_place() -> None:
    """The serial queue is the window one wide with batches of one: a failed head is judged there (``alone``: one
    candidate at a time), where a wider window judges it apart and refills (``judge_head``); the rest is the same."""
    assert decide([Slot(1, "fail")], serial=True) == Decision("alone")
    assert decide([Slot(1, "timeout")], serial=True) == Decision("alone")
    assert decide([Slot(1, "fail")]) == Decision("judge_head")
    assert decide([Slot(1, "pass")], serial=True) == Decision("land", 0)
    assert decide([Slot(1, "flaky")], serial=True) == Decision("land", 0)
    assert decide([Slot(1)], serial=True) == Decision("wait")
    assert decide([Slot(1, valid=False)], serial=True) == Decision("cut", 0)
    assert decide([], serial=True) == Decision("wait")


def test_a_later_pass_covers_the_runs_ahead_of_it() -> None:
    # slot 2's run passed on main + c1 + c2: both land by one move of main, whatever slot 1's run says later
    assert decide([Slot(1), Slot(2, "pass")]) == Decision("land", 1)
    assert decide([Slot(1, "pass"), Slot(2, "pass"), Slot(3)]) == Decision("land", 1)
    # but never past a failure: what follows it was built on it
    assert decide([Slot(1, "fail"), Slot(2, "pass")]) == Decision("cut", 1)


def test_everything_behind_a_failing_run_is_cut_but_the_failing_one_waits_its_turn() -> None:
    slots = [Slot(1), Slot(2, "fail"), Slot(3, "pass"), Slot(4)]
    assert decide(slots) == Decision("cut", 2)
    assert decide([Slot(1), Slot(2, "fail")]) == Decision("wait")  # nothing behind it: wait for the head


def test_a_passing_head_lands_before_anything_behind_a_failure_is_cut() -> None:
    # (found by `python -m bench.fleet`: cutting first, then refilling behind the failure, never landed the head)
    assert decide([Slot(1, "pass"), Slot(2, "fail"), Slot(3), Slot(4)]) == Decision("land", 0)
    assert decide([Slot(2, "fail"), Slot(3), Slot(4)]) == Decision("cut", 1)
    assert decide([Slot(2, "fail")]) == Decision("judge_head")


def test_a_withdrawn_candidate_is_cut_with_everything_built_on_it() -> None:
    assert decide([Slot(1, "pass"), Slot(2, valid=False), Slot(3)]) == Decision("cut", 1)
    assert decide([Slot(1, "pass", valid=False)]) == Decision("cut", 0)


def test_the_window_grows_by_one_and_halves_within_bounds() -> None:
    assert next_width(2, passed=True, ceiling=4) == 3
    assert next_width(4, passed=True, ceiling=4) == 4
    assert next_width(4, passed=False, ceiling=4) == 2
    assert next_width(1, passed=False, ceiling=4) == 1
    assert next_width(5, passed=False, floor=2, ceiling=8) == 2


def test_the_decision_carries_the_new_width() -> None:
    """The executor only carries out the width the planner gives: one wider after a landing, halved (never below the
    floor the failure rate allows) after a failure, unchanged while waiting or cutting a withdrawn slot, and
    unchanged by a red main's step (main's failure is not the window's)."""
    size = Sizing(width=4, ceiling=8, fail_rate=0.3)  # floor 1
    assert decide([Slot(1, "pass")], sizing=size) == Decision("land", 0, width=5)
    assert decide([Slot(1, "fail")], sizing=size) == Decision("judge_head", width=2)
    assert decide([Slot(1, "fail"), Slot(2)], sizing=size) == Decision("cut", 1, width=2)
    assert decide([Slot(1), Slot(2, valid=False)], sizing=size) == Decision("cut", 1)
    assert decide([Slot(1)], sizing=size) == Decision("wait")
    assert decide([Slot(1, "fail")], red=True, sizing=size) == Decision("alone")
    assert decide([Slot(1, "fail")], serial=True, sizing=Sizing(1, 1)) == Decision("alone", width=1)
    risky = [Slot(1, checkpoint=False, risk=0.1), Slot(2, "fail", risk=0.1)]
    assert decide(risky, sizing=size) == Decision("apart", 0, width=2)
    assert decide([Slot(1, risk=0.1), Slot(2, "fail", risk=0.1)], sizing=size) == Decision("leave_out", 1, width=2)
    # at p = 0.2 the floor is 3: a failure halves an 8-wide window to 4, a 4-wide one to 3 only
    assert resize(Sizing(8, 8, 0.2), passed=False) == 4 and resize(Sizing(4, 8, 0.2), passed=False) == 3
    assert resize(Sizing(8, 8, 0.2), passed=True) == 8


def test_the_window_floor_is_as_deep_as_a_run_still_likely_to_land() -> None:
    assert window_floor(0.0, 8) == 8  # nothing fails: never shrink
    assert window_floor(0.1, 4) == 4 and window_floor(0.1, 16) == 6  # 0.9^6 = 0.53, 0.9^7 = 0.48
    assert window_floor(0.2, 8) == 3  # 0.8^3 = 0.51, 0.8^4 = 0.41
    assert window_floor(0.3, 8) == 1 and window_floor(1.0, 8) == 1
    assert next_width(4, passed=False, ceiling=4, floor=window_floor(0.1, 4)) == 4
    assert next_width(8, passed=False, ceiling=8, floor=window_floor(0.2, 8)) == 4
    assert next_width(4, passed=False, ceiling=8, floor=window_floor(0.2, 8)) == 3


@given(st.floats(0.0, 1.0), st.integers(1, 64))
def test_the_window_floor_stays_in_bounds_and_falls_as_failures_rise(p: float, ceiling: int) -> None:
    k = window_floor(p, ceiling)
    assert 1 <= k <= ceiling
    assert k == 1 or (1 - p) ** k >= 0.5
    assert k == ceiling or (1 - p) ** (k + 1) < 0.5
    assert window_floor(min(1.0, p + 0.1), ceiling) <= k


def test_the_model_bound() -> None:
    assert expected_landings_per_run(1, 0.0) == 1.0
    assert abs(expected_landings_per_run(4, 0.1) - (0.9 + 0.81 + 0.729 + 0.6561)) < 1e-12
    assert expected_landings_per_run(4, 1.0) == 0.0


def test_a_failing_batch_is_bisected() -> None:
    batch = [Slot(1, checkpoint=False), Slot(2, checkpoint=False), Slot(3, checkpoint=False), Slot(4, "fail")]
    assert decide(batch) == Decision("checkpoint", 1)  # is the culprit among the first two?
    first_half_passes = [Slot(1, checkpoint=False), Slot(2, "pass"), Slot(3, checkpoint=False), Slot(4, "fail")]
    assert decide(first_half_passes) == Decision("land", 1)
    assert decide([Slot(3, checkpoint=False), Slot(4, "fail")]) == Decision("checkpoint", 0)
    assert decide([Slot(3, "pass"), Slot(4, "fail")]) == Decision("land", 0)
    assert decide([Slot(4, "fail")]) == Decision("judge_head")
    # the culprit is in the first half: the second half was built on it and goes back to the queue
    first_half_fails = [Slot(1, checkpoint=False), Slot(2, "fail"), Slot(3, checkpoint=False), Slot(4, "fail")]
    assert decide(first_half_fails) == Decision("cut", 2)
    assert decide(first_half_fails[:2]) == Decision("checkpoint", 0)


def test_an_uncovered_tail_gets_a_run() -> None:
    assert decide([Slot(1, checkpoint=False)]) == Decision("checkpoint", 0)
    assert decide([Slot(1), Slot(2, checkpoint=False)]) == Decision("checkpoint", 1)


def test_a_failing_batch_is_bisected_on_every_free_worker_at_once() -> None:
    batch = [Slot(1, checkpoint=False), Slot(2, checkpoint=False), Slot(3, checkpoint=False), Slot(4, "fail")]
    assert decide(batch, free=3) == Decision("checkpoint", 0, (1, 2))  # one run's time finds the culprit
    assert decide(batch, free=2) == Decision("checkpoint", 0, (2,))
    assert decide(batch, free=0) == Decision("wait")
    # a stretch already split waits for its runs, or splits the next stretch with what is left
    split = [Slot(1, checkpoint=False), Slot(2), Slot(3, checkpoint=False), Slot(4, "fail")]
    assert decide(split, free=1) == Decision("checkpoint", 0)
    assert decide(split, free=2) == Decision("checkpoint", 0, (2,))
    assert decide([Slot(1), Slot(2), Slot(3, "fail")], free=4) == Decision("wait")
    # the culprit is the first slot of the first stretch that fails: cut behind it, the rest of it landed
    assert decide([Slot(1, "pass"), Slot(2, "fail"), Slot(3, "fail"), Slot(4, "fail")], free=3) == Decision("land", 0)
    assert decide([Slot(2, "fail"), Slot(3, "fail"), Slot(4, "fail")]) == Decision("cut", 1)


@given(st.lists(st.booleans(), min_size=1, max_size=40), st.integers(min_value=0, max_value=8))
def test_a_bisection_splits_only_unchecked_slots_ahead_of_the_failure(checked: list[bool], free: int) -> None:
    slots = [Slot(i, checkpoint=c) for i, c in enumerate(checked)] + [Slot(len(checked), "fail")]
    points = bisection(slots, len(checked), free)
    assert len(points) == len(set(points)) <= free
    assert all(0 <= i < len(checked) and not checked[i] for i in points)
    unchecked = checked.count(False)
    assert len(points) == min(free, unchecked)  # no free worker is left idle while a slot could be split


def test_batches_only_pay_while_failures_are_rare() -> None:
    assert batch_size(0.0, 8) == 8
    assert batch_size(0.02, 8) == 8
    assert batch_size(0.5, 8) == 1
    assert batch_size(0.3, 8, width=4) == 1
    assert batch_size(0.1, 1) == 1
    assert batch_size(0.1, 4, width=4) == 4
    assert batch_rate(1, 1, 0.1) == 0.9
    assert abs(batch_rate(1, 4, 0.1) - expected_landings_per_run(4, 0.1)) < 1e-12  # no batches: the model bound
    assert batch_rate(4, 1, 0.0) == 4.0
    assert batch_rate(4, 1, 0.5) < batch_rate(1, 1, 0.5)
    assert [bisection_rounds(b, w) for b, w in ((1, 4), (4, 1), (5, 4), (6, 4))] == [0, 2, 1, 2]
    rate = 0.1
    for _ in range(100):
        rate = observe_failure(rate, True)
    assert rate > 0.99 and batch_size(rate, 8) == 1
    for _ in range(150):
        rate = observe_failure(rate, False)
    assert rate < 0.01 and batch_size(rate, 8) == 8


OUTCOMES = st.sampled_from([None, "pass", "flaky", "fail", "timeout", "error"])


RISKS = st.sampled_from([0.0, 0.01, 0.03, 0.1, 0.3, 0.9])


@given(st.lists(st.tuples(OUTCOMES, st.booleans(), st.booleans(), RISKS), max_size=8), st.integers(0, 6))
def test_only_verified_valid_prefixes_ever_land(raw: list[tuple[str | None, bool, bool, float]], free: int) -> None:
    slots = [Slot(i, outcome if checkpoint else None, valid, checkpoint, risk)
             for i, (outcome, valid, checkpoint, risk) in enumerate(raw)]
    d = decide(slots, free=free)
    if d.action == "land":
        # main moves to slot d.index's merge: its own run passed, and nothing ahead of it failed or left
        assert slots[d.index].passed and all(s.valid for s in slots)
        assert not any(s.failed for s in slots[:d.index])
    if d.action == "cut":
        assert 0 <= d.index < len(slots)
        invalid = [i for i, s in enumerate(slots) if not s.valid]
        assert d.index in invalid or slots[d.index - 1].failed
    if d.action == "judge_head":
        assert slots[0].failed and len(slots) == 1
    if d.action == "checkpoint":
        assert not slots[d.index].checkpoint and len(d.more) < max(free, 1)
    if d.action == "leave_out":  # the failing stretch's riskiest slot, and a run for the rest
        failed = len(slots) - 1
        lo = max((i for i in range(failed) if slots[i].checkpoint), default=-1)
        assert slots[failed].failed and (free >= 1 or lo == failed - 1 >= 0)  # a run for the rest, or one ahead
        assert lo < d.index <= failed and slots[d.index].risk == max(s.risk for s in slots[lo + 1:])
        assert d.more == () and (d.index == failed == lo + 1 or 2 * slots[d.index].risk > sum(
            s.risk for s in slots[lo + 1:]))  # alone behind a pending run, or a clear culprit
    if d.action == "apart":  # the whole failed stretch, behind the last run ahead of it; no clear culprit in it
        failed = len(slots) - 1
        lo = max((i for i in range(failed) if slots[i].checkpoint), default=-1)
        assert slots[failed].failed and d.index == lo + 1 < failed
        assert 2 * max(s.risk for s in slots[lo + 1:]) <= sum(s.risk for s in slots[lo + 1:]) + 1e-12
    if d.action == "wait":  # for a run, or for a free worker: never idle while a failure could be split
        assert any(s.checkpoint and s.outcome is None for s in slots) or not slots or (
            free == 0 and any(s.failed for s in slots))


def test_the_likeliest_culprit_is_left_out_and_the_rest_runs_without_it() -> None:
    batch = [Slot(1, checkpoint=False, risk=0.03), Slot(2, checkpoint=False, risk=0.3),
             Slot(3, checkpoint=False, risk=0.03), Slot(4, "fail", risk=0.03)]
    assert decide(batch, free=1) == Decision("leave_out", 1)
    assert decide(batch, free=3) == Decision("leave_out", 1)  # it carries most of the mass: no bisection too
    assert decide(batch, free=0) == Decision("wait")
    # equal estimates name no culprit: the stretch is judged apart, whatever the free workers (rule 4b)
    even = [Slot(i, checkpoint=False, risk=0.1) for i in range(3)] + [Slot(3, "fail", risk=0.1)]
    assert decide(even, free=1) == Decision("apart", 0)
    assert decide(even[2:], free=1) == Decision("apart", 0)  # a batch of two: a guess would be wrong half the time
    assert decide(even, free=0) == Decision("apart", 0)
    behind = [Slot(9, risk=0.1), *even]  # behind a run still pending: the stretch after it
    assert decide(behind, free=0) == Decision("apart", 1)
    # no estimates (a queue that is not risk-aware): the plain bisection
    unknown = [Slot(i, checkpoint=False) for i in range(3)] + [Slot(3, "fail")]
    assert decide(unknown, free=1) == Decision("checkpoint", 1)
    # a stretch of one is judged at the head; behind a run still pending it is left out, with no run of its own
    assert decide([Slot(1, "pass", risk=0.1), Slot(2, "fail", risk=0.5)]) == Decision("land", 0)
    assert decide([Slot(2, "fail", risk=0.5)]) == Decision("judge_head")
    assert decide([Slot(1, risk=0.1), Slot(2, "fail", risk=0.5)], free=0) == Decision("leave_out", 1)
    assert decide([Slot(1), Slot(2, "fail")], free=0) == Decision("wait")  # without estimates: it waits its turn


def test_a_suspect_with_half_the_mass_or_less_is_no_clear_culprit() -> None:
    batch = [Slot(i, checkpoint=False, risk=0.1) for i in range(5)] + [Slot(5, "fail", risk=0.15)]
    assert decide(batch, free=3) == Decision("apart", 0)
    clear = [Slot(0, checkpoint=False, risk=0.1), Slot(1, checkpoint=False, risk=0.05), Slot(2, "fail", risk=0.2)]
    assert decide(clear, free=1) == Decision("leave_out", 2)  # 0.2 of 0.35: more than half
    assert decide([Slot(0, checkpoint=False, risk=0.1), Slot(1, "fail", risk=0.1)], free=1) == Decision("apart", 0)


def test_a_bisection_splits_the_failure_mass_not_the_count() -> None:
    slots = [Slot(0, checkpoint=False, risk=0.3), Slot(1, checkpoint=False, risk=0.01),
             Slot(2, checkpoint=False, risk=0.01), Slot(3, checkpoint=False, risk=0.01), Slot(4, "fail", risk=0.01)]
    assert bisection(slots, 4, 1) == (0,)  # is it the risky one? (by count: the middle, 1)
    assert bisection([Slot(s.candidate_id, s.outcome, checkpoint=s.checkpoint) for s in slots], 4, 1) == (1,)


def test_a_batch_must_stay_likely_to_pass() -> None:
    assert pass_threshold(0.1, 1) == 0.9  # no batches: one candidate's own chance
    assert pass_threshold(0.5, 8) == 0.7  # never a batch expected to fail more than three times in ten
    assert pass_threshold(0.01, 8, 4) == 0.99 ** 8
    assert 0.7 <= pass_threshold(0.1, 8, 4) < 0.9


def test_the_fill_forms_batches_as_the_planner_says() -> None:
    """Which slots get a run as the window fills: by count, a run per full batch; risk-aware, a batch grows while it
    stays likely enough to pass, and a likely failure runs alone. A serial window (batches of one) runs each."""
    assert batching(0.1, 1, 1, False) == Batching(1) and batching(0.1, 1, 1, True) == Batching(1, 0.9)
    assert batching(0.5, 8, 4, True) == Batching(8, 0.7)
    assert closes([0.1], Batching(1)) and closes([0.1], Batching(1, 0.9))
    by_count = Batching(3)
    assert not closes([0.9, 0.9], by_count) and closes([0.0, 0.0, 0.0], by_count)
    assert joins([0.9, 0.9, 0.9], 0.9, by_count)  # by count, estimates do not matter
    risky = Batching(4, 0.7)
    assert joins([], 0.9, risky)  # an empty batch takes anyone
    assert joins([0.1, 0.1], 0.1, risky) and not joins([0.1, 0.1, 0.1], 0.1, risky)  # 0.9^3 = 0.73, 0.9^4 = 0.66
    assert closes([0.05, 0.4], risky)  # a likely failure runs alone (its batch closes on it)
    assert not closes([0.05, 0.1], risky) and closes([0.0] * 4, risky)


@given(st.integers(1, 64), st.booleans(), st.integers(1, 64))
def test_width_stays_in_bounds(width: int, passed: bool, ceiling: int) -> None:
    w = next_width(width, passed=passed, ceiling=ceiling)
    assert 1 <= w <= max(1, ceiling)
