"""The verdict policy, as functions from results to a decision: pure, tested alone like the planner.

A candidate's check runs on its exact merged commit. After each run, ``next_step`` says what follows:
  1. the run passed: land (``pass``);
  2. it failed, timed out or errored, and a retry is due (always after an error; after a failure or a timeout
     unless the server trusts first failures, MERGEBOT_RETRY_FAILED_CHECKS=0): run it again on the same commit.
     A run that reached its disk or memory limit (``disk_limit``, ``memory_limit``) is never retried: the
     candidate made it use that much, which a second run would not change, and a pass after it is no flake;
     nor is a run that exited 0 but whose tests did not hold up to main's (``tests_weakened``, ``no_report``:
     ``mergebot.landing.judge.compare``): it is rejected with that kind at once;
  3. the retry passed: land (``flaky``: failed once, passed on the same commit, not the candidate's fault);
     the retry errored too: reject as ``verifier_error`` (no verdict on the change);
  4. a failure stands: compare with main (``base``). Main failing too (fail or timeout; an error on main proves
     nothing about main) means the failure is pre-existing: park the candidate and mark main red. Otherwise it
     is the candidate's: reject as ``check_failed``, ``check_timeout``, ``disk_limit`` or ``memory_limit``.
A run whose tree is not the merged commit's tree is no evidence for it: it is judged an ``error``
(``about_other_tree``; the run keeps its own outcome). The runs are ``Judged``: the worker's run, untouched, and what
it was judged to be (``mergebot.models.judgement``); the policy reads the judged outcome. Where the base's result
comes from (``base_source``): main already known red (no run), main being the merged commit itself (the first run),
main known green (a pass of this command on it), else a run.

After a landing, ``post_land_covered`` says whether the landing's own run answers for main's new head, and
``main_change`` turns the post-land check's result into main's status change (red, green again, or none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mergebot.models.judgement import Judged
from verifier.runner import Result

Action = Literal["land", "retry", "base", "reject", "park"]
LIMITS = frozenset({"disk_limit", "memory_limit"})  # the run reached a limit: the candidate's failure, not retried
# it exited 0, but its tests do not hold up to main's, the subtask's acceptance tests or the held-out checks failed
JUDGED = frozenset({"tests_weakened", "no_report", "acceptance_failed", "held_out_failed", "tests_changed",
                    "report_flood"})
FAILED = frozenset({"fail", "timeout"}) | LIMITS  # what a failing check's outcome is (a verdict on the tree)
RETRIED = frozenset({"fail", "timeout"})


@dataclass(frozen=True)
class Runs:
    """The runs made so far on one candidate's merged commit (and on main, for the base check)."""

    first: Judged
    retry: Judged | None = None
    base: Result | None = None  # main's own run: nothing judged beyond its outcome


@dataclass(frozen=True)
class Step:
    action: Action
    outcome: str = ""  # land: "pass" or "flaky"
    kind: str = ""  # reject: "check_failed", "check_timeout", "disk_limit", "memory_limit" or "verifier_error"
    deciding: Judged | None = None  # the run the decision rests on (land, reject, park)


def about_other_tree(result: Result, merged_tree: str | None) -> bool:
    """Whether a result is about another tree than the merged commit's: then it is judged an ``error`` (the verifier
    vouched for nothing)."""
    return bool(result.tree_sha and merged_tree and result.tree_sha != merged_tree)


def retry_due(first: Judged, *, retry_failures: bool) -> bool:
    return first.outcome == "error" or (retry_failures and first.outcome in RETRIED)


def next_step(runs: Runs, *, retry_failures: bool) -> Step:
    first = runs.first
    if first.passed:
        return Step("land", "pass", deciding=first)
    if first.outcome in JUDGED:  # decided by the comparison with main's tests: nothing to retry or blame on main
        return Step("reject", kind=first.outcome, deciding=first)
    if retry_due(first, retry_failures=retry_failures):
        if runs.retry is None:
            return Step("retry")
        if runs.retry.passed:
            return Step("land", "flaky", deciding=runs.retry)
        if runs.retry.outcome == "error":
            return Step("reject", kind="verifier_error", deciding=runs.retry)
        if runs.retry.outcome in JUDGED:  # the retry ran to a pass of the exit code, but weakened the tests
            return Step("reject", kind=runs.retry.outcome, deciding=runs.retry)
    if runs.base is None:
        return Step("base")
    if runs.base.outcome in FAILED:
        return Step("park", deciding=first)
    return Step("reject", kind=failure_kind(first.outcome), deciding=first)


def failure_kind(outcome: str) -> str:
    """The verdict's kind for a check that failed on the candidate with this outcome."""
    if outcome in LIMITS:
        return outcome
    return "check_timeout" if outcome == "timeout" else "check_failed"


BaseSource = Literal["known_red", "same_commit", "lookup"]


def base_source(*, red_since: str | None, main: str, merged_sha: str) -> BaseSource:
    """Where the base check's answer comes from, before any I/O: ``lookup`` means "a pass of this command on main
    if one is recorded, else run the check on main"."""
    if red_since:
        return "known_red"  # main is known to be red: do not blame the candidate, do not re-prove it
    if main == merged_sha:
        return "same_commit"
    return "lookup"


def post_land_covered(*, rerun: bool, landed_result: str, landed_command: str, command: str) -> bool:
    """Whether the run that landed main's new head is its post-land check already: it passed (not flaky) with
    the command the repository runs now, and the server does not re-run anyway (MERGEBOT_POST_LAND_RERUN)."""
    return not rerun and landed_result == "pass" and landed_command == command


def main_change(*, passed: bool, red: bool, red_here: bool = False) -> Literal["red", "green", None]:
    """What a post-land result changes: main turns red (announce, park, mend), is green again (resume), or neither.
    ``red_here``: main was found red at this very commit before its post-land check ended (a candidate judged
    alone found it: ``alone``'s base check), which leaves the mend to this check when it fails."""
    if passed:
        return "green" if red else None
    return "red" if red_here or not red else None
