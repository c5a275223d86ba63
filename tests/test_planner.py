"""The speculation planner on its own: pure decisions, checked case by case and by property."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mergebot.landing.planner import Decision, Slot, decide, expected_landings_per_run, next_width


def test_an_empty_window_waits() -> None:
    assert decide([]) == Decision("wait")


def test_a_passing_head_lands_and_a_failing_head_is_judged() -> None:
    assert decide([Slot(1, "pass"), Slot(2)]) == Decision("land")
    assert decide([Slot(1, "flaky")]) == Decision("land")
    assert decide([Slot(1, "fail"), Slot(2, "pass")]) == Decision("judge_head")
    assert decide([Slot(1, "error")]) == Decision("judge_head")
    assert decide([Slot(1), Slot(2, "pass")]) == Decision("wait")


def test_everything_behind_a_failing_run_is_cut_but_the_failing_one_waits_its_turn() -> None:
    slots = [Slot(1), Slot(2, "fail"), Slot(3, "pass"), Slot(4)]
    assert decide(slots) == Decision("cut", 2)
    assert decide([Slot(1), Slot(2, "fail")]) == Decision("wait")  # nothing behind it: wait for the head


def test_a_passing_head_lands_before_anything_behind_a_failure_is_cut() -> None:
    # (found by bench/fleet.py: cutting first, then refilling behind the failure, never landed the head)
    assert decide([Slot(1, "pass"), Slot(2, "fail"), Slot(3), Slot(4)]) == Decision("land")
    assert decide([Slot(2, "fail"), Slot(3), Slot(4)]) == Decision("judge_head")


def test_a_withdrawn_candidate_is_cut_with_everything_built_on_it() -> None:
    assert decide([Slot(1, "pass"), Slot(2, valid=False), Slot(3)]) == Decision("cut", 1)
    assert decide([Slot(1, "pass", valid=False)]) == Decision("cut", 0)


def test_the_window_grows_by_one_and_halves_within_bounds() -> None:
    assert next_width(2, passed=True, ceiling=4) == 3
    assert next_width(4, passed=True, ceiling=4) == 4
    assert next_width(4, passed=False, ceiling=4) == 2
    assert next_width(1, passed=False, ceiling=4) == 1
    assert next_width(5, passed=False, floor=2, ceiling=8) == 2


def test_the_model_bound() -> None:
    assert expected_landings_per_run(1, 0.0) == 1.0
    assert abs(expected_landings_per_run(4, 0.1) - (0.9 + 0.81 + 0.729 + 0.6561)) < 1e-12
    assert expected_landings_per_run(4, 1.0) == 0.0


OUTCOMES = st.sampled_from([None, "pass", "flaky", "fail", "timeout", "error"])


@given(st.lists(st.tuples(OUTCOMES, st.booleans()), max_size=8))
def test_only_a_valid_passing_head_ever_lands(raw: list[tuple[str | None, bool]]) -> None:
    slots = [Slot(i, outcome, valid) for i, (outcome, valid) in enumerate(raw)]
    d = decide(slots)
    if d.action == "land":
        assert all(s.valid for s in slots) and slots[0].outcome in ("pass", "flaky")
    if d.action == "cut":
        assert 0 <= d.index < len(slots)
        invalid = [i for i, s in enumerate(slots) if not s.valid]
        failing = [i for i, s in enumerate(slots[1:], 1) if s.outcome in ("fail", "timeout", "error")]
        assert d.index in invalid or (d.index - 1 in failing and slots[0].outcome is None)
    if d.action == "judge_head":
        assert slots[0].outcome in ("fail", "timeout", "error") and all(s.valid for s in slots)


@given(st.integers(1, 64), st.booleans(), st.integers(1, 64))
def test_width_stays_in_bounds(width: int, passed: bool, ceiling: int) -> None:
    w = next_width(width, passed=passed, ceiling=ceiling)
    assert 1 <= w <= max(1, ceiling)
