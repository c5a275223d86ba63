"""The verdict policy alone (``mergebot.landing.judge.verdict``): what follows each run, from results to a decision.

Every path of a candidate's runs is walked here with plain ``Judged`` values (a run and what it was judged to be), as
the queue walks them with real runs: the table below is the policy in full, and a property checks the walk always
ends, in at most three runs.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mergebot.landing.judge import verdict
from mergebot.landing.judge.verdict import Runs, next_step
from mergebot.models.judgement import Judged, Judgement
from verifier.runner import Result

OUTCOMES = ("pass", "fail", "timeout", "error", "disk_limit", "memory_limit", "tests_weakened", "no_report")


def run(outcome: str, tree: str = "t" * 40, sha: str = "m" * 40) -> Result:
    return Result(sha, tree, "pytest -q", outcome, 0 if outcome == "pass" else 1, 10, "", "", 0, "d" * 64)


def judged(kind: str) -> Judged:
    """A run judged ``kind``: a judged kind is a run that exited 0 (its own outcome stays ``pass``)."""
    return Judged(run("pass" if kind in verdict.JUDGED else kind), Judgement(kind))


def walk(first: str, retry: str | None, base: str | None, *, retry_failures: bool = True) -> list[str]:
    """The steps the queue takes when the runs give these outcomes (None: never asked for)."""
    runs = Runs(judged(first))
    steps = []
    for _ in range(5):
        step = next_step(runs, retry_failures=retry_failures)
        steps.append(step.action if step.action in ("retry", "base") else
                     f"{step.action}:{step.outcome or step.kind or (step.deciding and step.deciding.outcome)}")
        if step.action == "retry":
            assert retry is not None, "a retry was asked for that the case did not expect"
            runs = Runs(runs.first, retry=judged(retry))
        elif step.action == "base":
            assert base is not None, "a base check was asked for that the case did not expect"
            runs = Runs(runs.first, runs.retry, run(base, sha="b" * 40))
        else:
            return steps
    raise AssertionError(f"no decision after five steps: {steps}")


@pytest.mark.parametrize(("first", "retry", "base", "steps"), [
    ("pass", None, None, ["land:pass"]),
    ("fail", "pass", None, ["retry", "land:flaky"]),
    ("timeout", "pass", None, ["retry", "land:flaky"]),
    ("error", "pass", None, ["retry", "land:flaky"]),
    ("fail", "fail", "pass", ["retry", "base", "reject:check_failed"]),
    ("timeout", "timeout", "pass", ["retry", "base", "reject:check_timeout"]),
    ("fail", "error", None, ["retry", "reject:verifier_error"]),
    # a limit is the candidate's failure: never retried, compared with main, its own kind
    ("disk_limit", None, "pass", ["base", "reject:disk_limit"]),
    ("memory_limit", None, "pass", ["base", "reject:memory_limit"]),
    ("disk_limit", None, "disk_limit", ["base", "park:disk_limit"]),
    ("memory_limit", None, "fail", ["base", "park:memory_limit"]),
    ("fail", "disk_limit", "pass", ["retry", "base", "reject:check_failed"]),
    # a run that exited 0 but whose tests did not hold up to main's: rejected at once, never retried or compared
    ("tests_weakened", None, None, ["reject:tests_weakened"]),
    ("no_report", None, None, ["reject:no_report"]),
    ("fail", "tests_weakened", None, ["retry", "reject:tests_weakened"]),
    ("error", "error", None, ["retry", "reject:verifier_error"]),
    ("error", "fail", "pass", ["retry", "base", "reject:check_failed"]),
    ("fail", "fail", "fail", ["retry", "base", "park:fail"]),
    ("fail", "fail", "timeout", ["retry", "base", "park:fail"]),
    ("fail", "fail", "error", ["retry", "base", "reject:check_failed"]),  # an error on main proves nothing
])
def test_each_path_of_runs(first: str, retry: str | None, base: str | None, steps: list[str]) -> None:
    assert walk(first, retry, base) == steps


def test_without_retries_a_failure_goes_straight_to_the_base_but_an_error_is_still_retried() -> None:
    assert walk("fail", None, "pass", retry_failures=False) == ["base", "reject:check_failed"]
    assert walk("timeout", None, "fail", retry_failures=False) == ["base", "park:timeout"]
    assert walk("error", "pass", None, retry_failures=False) == ["retry", "land:flaky"]


def test_the_deciding_run_is_the_one_the_decision_rests_on() -> None:
    first, retry = judged("fail"), judged("pass")
    assert next_step(Runs(first, retry), retry_failures=True).deciding is retry  # flaky: the pass lands
    base = run("fail", sha="b" * 40)
    assert next_step(Runs(first, judged("fail"), base), retry_failures=True).deciding is first  # parked on it


def test_the_policy_reads_the_judged_outcome_and_the_run_keeps_its_own() -> None:
    weakened = judged("tests_weakened")
    step = next_step(Runs(weakened), retry_failures=True)
    assert (step.action, step.kind) == ("reject", "tests_weakened")
    assert step.deciding is weakened and weakened.run.outcome == "pass" and weakened.as_json()["run_outcome"] == "pass"


def test_a_run_on_another_tree_is_an_error_and_never_a_pass() -> None:
    good = run("pass", tree="a" * 40)
    assert not verdict.about_other_tree(good, "a" * 40)
    assert verdict.about_other_tree(good, "b" * 40) and good.outcome == "pass"  # judged an error; the run stays
    assert not verdict.about_other_tree(run("pass", tree=""), "b" * 40)  # no tree named: not checked


def test_where_the_base_check_comes_from() -> None:
    assert verdict.base_source(red_since="r" * 40, main="m", merged_sha="x") == "known_red"
    assert verdict.base_source(red_since=None, main="m", merged_sha="m") == "same_commit"
    assert verdict.base_source(red_since=None, main="m", merged_sha="x") == "lookup"


def test_post_land_reuses_only_a_clean_pass_of_the_same_command() -> None:
    assert verdict.post_land_covered(rerun=False, landed_result="pass", landed_command="c", command="c")
    assert not verdict.post_land_covered(rerun=True, landed_result="pass", landed_command="c", command="c")
    assert not verdict.post_land_covered(rerun=False, landed_result="flaky", landed_command="c", command="c")
    assert not verdict.post_land_covered(rerun=False, landed_result="pass", landed_command="c", command="d")


def test_main_turns_red_once_and_green_once() -> None:
    assert verdict.main_change(passed=False, red=False) == "red"
    assert verdict.main_change(passed=False, red=True) is None  # already red: not announced again
    assert verdict.main_change(passed=True, red=True) == "green"
    assert verdict.main_change(passed=True, red=False) is None
    # red at this very commit by a base check before its post-land check ended: that check mends it
    assert verdict.main_change(passed=False, red=True, red_here=True) == "red"
    assert verdict.main_change(passed=True, red=True, red_here=True) == "green"


@settings(max_examples=300, deadline=None)
@given(first=st.sampled_from(OUTCOMES), retry=st.sampled_from(OUTCOMES), base=st.sampled_from(OUTCOMES),
       retry_failures=st.booleans())
def test_every_walk_ends_in_a_decision_within_three_runs(first: str, retry: str, base: str,
                                                         retry_failures: bool) -> None:
    steps = walk(first, retry, base, retry_failures=retry_failures)
    assert steps[-1].split(":")[0] in ("land", "reject", "park")
    assert len(steps) <= 3
    if steps[-1].startswith("land"):
        assert "pass" in (first, retry)  # nothing lands without a passing run
    if steps[-1].startswith("park"):
        assert base in verdict.FAILED  # parked only when main itself fails (a limit on main is a failure)


def test_a_limit_on_main_turns_it_red() -> None:
    """A post-land check that reaches its disk or memory limit is a failure of main like any other."""
    for outcome in verdict.LIMITS:
        assert not run(outcome).passed
        assert verdict.main_change(passed=run(outcome).passed, red=False) == "red"
        assert verdict.failure_kind(outcome) == outcome
    assert verdict.failure_kind("timeout") == "check_timeout" and verdict.failure_kind("fail") == "check_failed"


@pytest.mark.parametrize(("kind", "said"), [
    ("check_failed", "gave fail (exit 1)"), ("check_timeout", "gave fail (exit 1)"),
    ("flaky_then_failed", "now gave fail"), ("tests_weakened", "do not pass on the merged commit"),
    ("acceptance_failed", "acceptance tests did not all pass"),
    ("held_out_failed", "held-out checks failed"), ("no_report", "reported nothing"),
    ("disk_limit", "reached its disk limit")])
def test_a_rejection_says_what_happened_before_the_check_command(kind: str, said: str) -> None:
    """A forge's status holds 140 characters of ``[kind] reason``: with a check under a long path (CI's checkout
    sits deeper than a laptop's), the command came first and the verdict was cut off. It comes after now."""
    from mergebot import messages
    from mergebot.forge.client import truncate_description

    long = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 /a/very/deep/checkout/of/the/bot/.venv/bin/python3 -m pytest -q tests"
    text = messages.rejection(messages.Rejection(kind, "main", "c" * 40, command=long, run=run("fail"),
                                                 merged_sha="d" * 40))
    status = truncate_description(f"[{kind}] {text}")
    assert said in status and long not in status and f"`{long}`" in text, text
