"""The failure estimate alone (``mergebot.landing.intake.risk``): what raises it, what bounds it, and its calibration
table. Pure, like the planner: plain ``Facts`` in, a probability out."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from mergebot.landing.intake import risk
from mergebot.landing.intake.risk import Facts, estimate

SEASONED = Facts(agent_finished=40, agent_failed=2, repo_finished=300, repo_failed=30)


def test_an_agent_without_history_starts_at_the_repository_rate() -> None:
    got = estimate(Facts(repo_finished=1000, repo_failed=200))
    assert abs(got.p - 0.2) < 0.01 and abs(got.prior - 0.2) < 0.01
    assert abs(estimate(Facts()).p - risk.DEFAULT_PRIOR) < 1e-9  # no history anywhere: the default prior


def test_a_long_record_outweighs_the_prior() -> None:
    careful = estimate(replace(SEASONED, agent_failed=1)).p
    careless = estimate(replace(SEASONED, agent_failed=20)).p
    assert careful < 0.07 < 0.4 < careless


def test_each_sign_of_trouble_raises_the_estimate() -> None:
    base = estimate(SEASONED).p
    assert estimate(replace(SEASONED, after_failure=True)).p > base
    assert estimate(replace(SEASONED, attempt=3)).p > base
    assert estimate(replace(SEASONED, lines=3000)).p > estimate(replace(SEASONED, lines=300)).p > base
    assert estimate(replace(SEASONED, lines=100)).p == base  # small changes cost nothing
    assert estimate(replace(SEASONED, path_finished=20, path_failed=12)).p > base
    assert estimate(replace(SEASONED, path_finished=20, path_failed=0)).p < base  # quiet paths lower it
    assert estimate(replace(SEASONED, path_finished=2, path_failed=2)).p == base  # too few to count


def test_a_fix_counts_as_the_repository_s_fixes_have_done() -> None:
    unknown = estimate(replace(SEASONED, after_failure=True)).p
    guesses = estimate(replace(SEASONED, after_failure=True, fix_finished=40, fix_failed=20)).p
    sure = estimate(replace(SEASONED, after_failure=True, fix_finished=40, fix_failed=0)).p
    assert sure < estimate(SEASONED).p < unknown < guesses


def test_the_page_sees_what_each_part_added() -> None:
    got = estimate(replace(SEASONED, after_failure=True, attempt=2)).as_json()
    assert set(got["terms"]) == {"agent", "after_failure", "attempt"} and 0 < got["p"] < 1


@given(agent_finished=st.integers(0, 200), agent_failed=st.integers(0, 200), repo_finished=st.integers(0, 500),
       repo_failed=st.integers(0, 500), attempt=st.integers(1, 50), after=st.booleans(),
       lines=st.one_of(st.none(), st.integers(0, 10**7)), path_finished=st.integers(0, 500),
       path_failed=st.integers(0, 500), fix_finished=st.integers(0, 300), fix_failed=st.integers(0, 300))
def test_the_estimate_is_a_probability_and_grows_with_failures(agent_finished: int, agent_failed: int,
                                                                repo_finished: int, repo_failed: int, attempt: int,
                                                                after: bool, lines: int | None, path_finished: int,
                                                                path_failed: int, fix_finished: int,
                                                                fix_failed: int) -> None:
    facts = Facts(agent_finished, min(agent_failed, agent_finished), repo_finished, min(repo_failed, repo_finished),
                  attempt, after, lines, 0, path_finished, min(path_failed, path_finished), fix_finished,
                  min(fix_failed, fix_finished))
    p = estimate(facts).p
    assert risk.LOW <= p <= risk.HIGH
    if facts.agent_failed < facts.agent_finished:
        assert estimate(replace(facts, agent_failed=facts.agent_failed + 1)).p >= p


def test_calibration_groups_predictions_by_decile() -> None:
    pairs = [(i / 100, i % 10 == 0) for i in range(100)]  # ten in each decile, one failure each
    table = risk.calibration(pairs)
    assert len(table) == 10 and all(n == 10 and observed == 0.1 for _, _, observed, n in table)
    assert [round(low, 2) for low, _, _, _ in table] == [i / 10 for i in range(10)]
    assert risk.calibration([]) == [] and len(risk.calibration([(0.5, True)] * 3)) == 3
