"""What the queue tells a candidate's owner and reviewers: rejections, parking, a landing reverted, re-planning.
What main's state tells operators is ``operators``; the commit messages of a revert are ``evidence``.

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mergebot.messages.refs import subtask_branch
from mergebot.messages.words import _counted, _short, _shown
from mergebot.models.judgement import Comparison, HeldOut, Judgement
from verifier.runner import Result


# -- the queue's verdicts ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rejection:
    """Why the queue sent a candidate back to its owner.

    ``kind``: ``conflict`` (``paths`` conflict with the target branch), ``nothing_to_land`` (already on it),
    ``verifier_error`` (the verifier could not run the check, twice: no verdict on the change),
    ``check_failed`` or ``check_timeout`` (``run`` is the deciding run; ``retried`` says whether a retry on
    the same commit ruled flakiness out), ``disk_limit`` or ``memory_limit`` (the run reached that limit of the
    repository's sandbox and was ended; never retried), or a judged kind (``judgement`` says what the run's tests
    came to: the comparison with main's, the acceptance tests, the changed tests, the held-out checks)."""

    kind: str
    target_branch: str
    sha: str
    command: str = ""  # the repository's check
    merged_sha: str | None = None
    paths: tuple[str, ...] = ()
    run: Result | None = None
    retried: bool = True
    hunks: tuple[dict[str, object], ...] = ()  # a conflict's regions (``mergebot.git.changes.conflict_hunks``)
    judgement: Judgement | None = None  # what the deciding run was judged to be
    # a conflict: the other candidates in flight that change its conflicting files (``in_flight_record``)
    in_flight: tuple[Mapping[str, Any], ...] = ()

    @property
    def comparison(self) -> Comparison:
        got = self.judgement.comparison if self.judgement is not None else None
        return got if got is not None else Comparison()

    @property
    def held_out(self) -> HeldOut:
        got = self.judgement.held_out if self.judgement is not None else None
        return got if got is not None else HeldOut("fail")


REASON_MAX = 2000  # a subtask's reason holds at most this much (the schema's bound): the whole log is elsewhere


def rejection(r: Rejection) -> str:
    """The sentence a rejected candidate's owner reads, at most ``REASON_MAX`` characters."""
    text = _rejection(r)
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 1] + "…"


def _rejection(r: Rejection) -> str:
    if r.kind == "conflict":
        return (f"conflicts with {r.target_branch} in: {_shown(r.paths, 10)}. Fetch {r.target_branch}, merge or "
                f"rebase onto it, resolve, and push again.{in_flight_clause(r.in_flight, r.target_branch)}")
    if r.kind == "nothing_to_land":
        return f"nothing to land: {_short(r.sha)} is already on {r.target_branch}."
    assert r.run is not None
    if r.kind == "flaky_then_failed":
        return (f"the check failed once and passed on a retry (flaky), and now gave {r.run.outcome} (exit "
                f"{r.run.exit_code}) on the merged commit {_short(r.merged_sha)} with the newer {r.target_branch}"
                f"{_ran(r)}:\n{r.run.excerpt()}")
    if r.kind == "verifier_error":
        return (f"the verifier could not run the check on {_short(r.merged_sha)} (twice): {r.run.excerpt(5)}\n"
                "This is not a verdict on your change; push again, or ask an operator to look at the verifier.")
    if r.kind == "tests_weakened":
        changes, count = r.comparison.weakened, r.comparison.weakened_count or len(r.comparison.weakened)
        shown = "; ".join(f"{c.id} ({c.was} on {r.target_branch}, {c.now} now)" for c in changes[:8])
        more = f"; and {count - 8} more" if count > 8 else ""
        pass_, do = ("passes", "does") if count == 1 else ("pass", "do")
        marked = sorted({c.now for c in changes if c.now in ("skipped", "xfailed", "deselected")})
        unmark = (f" A {'/'.join(marked)} test is not a removed one: take out what skips it (a skip or xfail mark, "
                  "a `pytest.skip()`, a deselection) and make it pass." if marked else "")
        return (f"{_counted(count, 'test')} that {pass_} on {r.target_branch} {do} not pass on the merged commit "
                f"{_short(r.merged_sha)}, though the check exited 0{_ran(r)}: {shown}{more}. "
                f"A change may not weaken the tests that judge it: make them pass as they are.{unmark} Only a test "
                "the change deletes can be let go, by a lead (`mergebot allow ID --test-removal`).")
    if r.kind == "acceptance_failed":
        failed = r.comparison.acceptance.failed if r.comparison.acceptance is not None else ()
        shown = "; ".join(f"{c.id} ({c.now})" for c in failed[:8])
        return (f"the subtask's acceptance tests did not all pass on the merged commit {_short(r.merged_sha)}, "
                f"though the check exited 0{_ran(r)}: {shown}. They are the subtask's contract: they "
                "run as attached, whatever the branch has at their paths.")
    if r.kind == "tests_changed":
        changed, failing = r.comparison.changed, r.comparison.old_tests_failing
        if failing is not None:
            return (f"the check passed on the merged commit {_short(r.merged_sha)}{_ran(r)}, "
                    f"but the change edits existing tests ({', '.join(changed[:8])}), and main's version of them "
                    f"fails against the change's code ({', '.join(failing[:8]) or 'the run failed'}): the edit "
                    "changed what the tests check, not only how.")
        return (f"the check passed on the merged commit {_short(r.merged_sha)}{_ran(r)}, but the change edits "
                f"{_counted(len(changed), 'existing test')} "
                f"({', '.join(changed[:8])}{', ...' if len(changed) > 8 else ''}), which this repository refuses: "
                "a test that changes with the code no longer checks it.")
    if r.kind == "held_out_failed":
        held = list(r.held_out.failing) + ([r.held_out.unnamed] if r.held_out.unnamed else [])
        return (f"the repository's held-out checks failed on the merged commit {_short(r.merged_sha)}, though the "
                f"check passed{_ran(r)} ({', '.join(held[:8]) or 'a held-out test failed'}"
                f"{', ...' if len(held) > 8 else ''}). Held-out checks are not shown; make the change do what the "
                "subtask asks.")
    if r.kind == "no_report":
        problem = ((r.run.tests or {}).get("problem") or "no outcomes")
        return (f"the tests reported nothing on the merged commit {_short(r.merged_sha)} ({problem}), though the "
                f"check exited 0{_ran(r)}, where {r.target_branch}'s report every test. A run whose "
                f"report was stopped proves nothing:\n{r.run.excerpt(8)}")
    if r.kind in ("disk_limit", "memory_limit"):
        limits = r.run.limits or {}
        what = (f"its disk limit ({limits.get('disk_limit_mb', '?')} MiB written in all: the checkout's changes, /tmp "
                "and /dev/shm)" if r.kind == "disk_limit" else
                f"its memory limit ({limits.get('memory_mb', '?')} MiB resident: the kernel killed a process of it)")
        return (f"the check reached {what} on the merged commit {_short(r.merged_sha)} and was ended{_ran(r)}. "
                f"A limit is the change's failure, never retried:\n{r.run.excerpt()}")
    once = "" if r.retried else (" (judged on this one run: this server does not retry failed checks, "
                                 "MERGEBOT_RETRY_FAILED_CHECKS=0)")
    return (f"{check_named(r.run)} gave {r.run.outcome} (exit {r.run.exit_code}) on the merged commit "
            f"{_short(r.merged_sha)}{once}{_ran(r)}:\n{r.run.excerpt()}")


def _ran(r: Rejection) -> str:
    """The command, after what it gave: a forge's 140-character status keeps the verdict, not a long path."""
    assert r.run is not None
    return f" (the check: `{r.command or r.run.command}`)"


def parked(target_branch: str, main: str) -> str:
    return (f"{target_branch} is red: the check fails on {_short(main)} too, so this failure is pre-existing, not the "
            "candidate's. Parked until main is green again.")


def reverted_evidence(subtask_id: int, version: int, target_branch: str, merged_sha: str, red_sha: str,
                      failing: list[str], probes: list[tuple[str, str]], candidate_sha: str) -> str:
    """What a reverted subtask's owner is told (its status reason), with the next command."""
    tests = f" Failing tests: {', '.join(failing[:10])}." if failing else ""
    runs = "; ".join(f"{_short(sha)} {outcome}" for sha, outcome in probes) or "none needed"
    nxt = version + 1
    branch = subtask_branch(subtask_id, nxt)
    return (f"Your landing {_short(merged_sha)} turned {target_branch} red (its check failed at {_short(red_sha)}) "
            f"and was reverted.{tests} Bisection runs: {runs}. The subtask is yours again at claim version {nxt}: "
            f"`git fetch origin {target_branch} && git checkout -B {branch} origin/{target_branch}"
            f" && git cherry-pick {candidate_sha}`, fix it so the check passes with what landed since, and push "
            f"{branch}.")


def dependency_reverted(subtask_id: int) -> str:
    return (f"waits: subtask {subtask_id}, which this subtask depends on, is not landed any more (its landing was "
            f"reverted because it broke main). Candidates of this subtask are not verified until subtask {subtask_id} "
            "lands again; keep working, and push as usual.")


# Why a candidate was put back in the queue, or waits there.
RECONCILING = "reconciling; verifying again"
AHEAD_FAILED = "a candidate ahead of it failed; re-planned"
AHEAD_FAILED_OR_WITHDRAWN = "a candidate ahead of it failed or was withdrawn; re-planned"
AHEAD_DID_NOT_LAND = "the candidate ahead of it did not land; re-planned"
REPLANNED_AFTER_ERROR = "re-planned after an error"
REPLANNED_AFTER_FAILURE = ("left out of a failed batch as its likeliest culprit, but the rest of the batch failed "
                           "too: the culprit may be elsewhere, so it is verified again")
WAITS_FOR_AHEAD = "waits for the candidates ahead of it"
WAITS_FOR_SAME_PATHS = "waits for the verdict on a failed candidate that touches the same paths"
BATCH_WITHDRAWN = "a candidate landing with it was withdrawn; verified again without it"
STOPPED_BEFORE_MAIN_MOVED = "the bot stopped before main moved; verifying again"


# The reasons that name the candidate's target branch: templates that ``on_branch`` fills in.
RED_ALONE = "{target_branch} is red; verifying against it alone"
MOVED_UNDER_SPECULATION = "{target_branch} moved under the speculation; verifying again"
MOVED_DURING_LANDING = "{target_branch} moved during landing; retrying"
FLAKY_REQUEUED = "failed once and passed on a retry of the same commit; verified again on the current {target_branch}"
PASSED_APART = ("its batch failed without a clear culprit, and it passed on {target_branch} alone; verified again on "
                "the current {target_branch} in a later batch")


def on_branch(reason: str, target_branch: str) -> str:
    """``reason``, one of the templates above, said of ``target_branch``."""
    return reason.format(target_branch=target_branch)


def newer_push(sha: str) -> str:
    return f"superseded by a newer push ({_short(sha)})"


def unannounced_push(subtask_id: int, tip: str, ref: str) -> str:
    return (f"a newer push of subtask {subtask_id} ({_short(tip)}) reached {ref} without being announced to the queue "
            "(the bot restarted during it); it is queued instead")


# Why a candidate no longer is what its subtask waits on (its fence).
FENCE_GONE = "the subtask no longer exists"
FENCE_REPLACED = "a newer push replaced this candidate"
FENCE_CANCELLED = "the subtask was cancelled ({reason}); nothing of it lands"
FENCE_RECLAIMED = "the subtask was reclaimed (claim version {claim_version})"
FENCE_STATUS = "the subtask is {status}"
# The same sentences for the SQL rule of the fence (``candidate_unfenced``), used by the statement that takes the
# next candidate and by the window's checks; it fills the placeholders in from the subtask's row.
FENCE_WORDS = {"gone": FENCE_GONE, "cancelled": FENCE_CANCELLED, "replaced": FENCE_REPLACED,
               "reclaimed": FENCE_RECLAIMED, "status": FENCE_STATUS}


def fence_reclaimed(claim_version: int) -> str:
    return FENCE_RECLAIMED.format(claim_version=claim_version)


def fence_cancelled(reason: str) -> str:
    return FENCE_CANCELLED.format(reason=reason)


def fence_status(status: str) -> str:
    return FENCE_STATUS.format(status=status)


# -- a candidate's page: what its agent was told, and where it conflicts ----------------------------------------------

CANDIDATE_TOLD_THEN = "as its agent was told when the candidate was rejected"
CANDIDATE_NEXT_NOW = "today, with the subtask as it is now"
CANDIDATE_TOLD_UNKNOWN = ("today's advice: this candidate was rejected before the bot kept what its agent was told, "
                          "so the words it read then are not known")
# -- approvals (issue 43) -------------------------------------------------------------------------------------------


def awaiting_approval(candidate_id: int, require: list[str]) -> str:
    """What a candidate that passed and waits for an approval is told (its reason, its verdict's message)."""
    what = "every change" if not require else f"a change touching {', '.join(require[:5])}"
    return (f"its checks passed, and this repository requires an approval for {what}: it waits for a lead's or "
            f"reviewer's approval of this exact commit (`mergebot approve {candidate_id}`, or `@mergebot approve` or "
            "an approving review on its pull request), then lands. A new push needs a new approval.")


def approved_by(name: str, via: str) -> str:
    """A candidate that waited and was approved, back in the queue (its reason until it is taken)."""
    how = {"api": "", "comment": " (`@mergebot approve`)", "review": " (an approving review)"}.get(via, "")
    return f"approved by {name}{how}: verified again where main moved, then it lands"


APPROVAL_RULE_CHANGED = "the repository's approval rule changed: judged by the new one once it passes again"


# -- named checks (issue 43) -----------------------------------------------------------------------------------------


def failed_check(run: Result) -> dict[str, object] | None:
    """The first required named check of a run that did not pass (None: a single check, or none failed)."""
    return next((c for c in run.checks or [] if c.get("required") and c.get("outcome") != "pass"), None)


def check_named(run: Result) -> str:
    """Which check a failing run's verdict is about: "the check", or the named check that failed, with the others'
    outcomes (``verifier.checks``)."""
    failed = failed_check(run)
    if failed is None:
        return "the check"
    others = ", ".join(f"{c['name']} {c['outcome']}{'' if c.get('required') else ' (optional)'}"
                       for c in run.checks or [] if c is not failed)
    return f"the required check `{failed['name']}`" + (f" (of the named checks; {others})" if others else "")


# -- waiting by commit, and re-queueing what is already in flight (issue 45) -----------------------------------------


def already_in_flight(candidate_id: int, status: str, subtask_id: int, sha: str) -> str:
    """``submit --again``, ``@mergebot retry`` or a lead's retry while that commit is queued or running: nothing
    is queued again (a babysitter re-queueing once a second costs nothing)."""
    return (f"already {status}: `{_short(sha)}` is candidate {candidate_id}; nothing was queued again. "
            f"`mergebot wait {subtask_id} --commit {_short(sha)}` follows it to its verdict.")


def no_candidate_for_commit(subtask_id: int, sha: str) -> str:
    """A wait keyed on (subtask, commit) that knows no candidate of that commit (yet)."""
    return (f"subtask {subtask_id} has no candidate for `{_short(sha)}` yet: `mergebot submit` pushes it "
            "(a forge's push is queued when its webhook arrives)")


# -- conflicts the bot resolves itself, and the ones it does not (issue 45) ------------------------------------------


def in_flight_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """One other candidate in flight that changes a conflict's files, as the conflict verdict records it
    (``in_flight``): from a row of ``candidates_touching``."""
    return {"candidate_id": row["id"], "subtask_id": row["subtask_id"], "owner": row["owner"],
            "status": row["status"], "paths": list(row["shared"] or [])}


def in_flight_clause(others: Sequence[Mapping[str, Any]], target_branch: str) -> str:
    """What a conflict's sentence adds when other candidates in flight change the same files: which ones, and to
    wait for them before redoing the work (else it may conflict again when they land)."""
    if not others:
        return ""
    shown = "; ".join(f"candidate {o['candidate_id']} of subtask {o['subtask_id']} by {o['owner']} ({o['status']}: "
                      f"{_shown([str(p) for p in o.get('paths') or []], 3)})" for o in others[:5])
    more = f"; and {len(others) - 5} more" if len(others) > 5 else ""
    return (f" Other candidates in flight change the same files: {shown}{more}. Wait until they have landed or "
            f"left the queue (`mergebot show SUBTASK` tells), then rebase onto {target_branch} once, or you may "
            "redo the work again when they land.")
