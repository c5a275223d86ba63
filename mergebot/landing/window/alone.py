"""One candidate judged alone, against main itself: the one judgement every executor path shares.

The landing executor (``mergebot.landing.window.executor``) comes here for a single candidate on a single merge onto
main:
  * a window one wide with batches of one (the serial queue) whose head failed: it is judged in its place;
  * while main is red (planner: ``alone``): the next queued candidate, merged onto main and judged there;
  * candidates judged apart while the window goes on (``mergebot.landing.window.apart``): a head that failed alone, a
    left-out suspect whose rest landed, each candidate of a failed stretch with no clear culprit.
The walk (``verify``): the first run (the window's, when it made one), then as ``mergebot.landing.judge.verdict`` says:
a retry of a failed check, main's own status (``_base``), and the end: pass or flaky (the passing run is
returned: the caller lands it or requeues it), rejected (the failure is the candidate's), or parked (the failure
is main's: main turns red and is mended like a red post-land check, ``postland.red_base``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mergebot import messages as say
from mergebot.git import repo as git
from mergebot.landing.context import Context
from mergebot.landing.judge import compare, evidence, runs, verdict, verdicts
from mergebot.landing.judge import step as judge
from mergebot.landing.main import land as landing
from mergebot.landing.main import postland
from mergebot.landing.target import Target, target_for
from mergebot.models import Candidate, Repo
from mergebot.models.judgement import Judged
from verifier.runner import Result

log = logging.getLogger(__name__)

Passed = tuple[Judged, str, dict[str, Any]]  # the deciding run (judged), ``pass`` or ``flaky``, the record of every run


async def merge(ctx: Context, repo: Repo, target: Target, cand: Candidate, main: str) -> git.Merge | None:
    """The candidate merged onto main; None when it was rejected (a conflict, or nothing to land)."""
    merged = await landing.merge_onto(ctx.db, target, cand, main)
    if await landing.reject_unmergeable(ctx.db, target, repo, cand, merged, main):
        return None
    return merged


async def verify(ctx: Context, repo: Repo, cand: Candidate, merge: git.Merge, main: str,
                 first: Judged | None = None, judging: judge.Judging | None = None) -> Passed | None:
    """The passing run on the merged commit, the verdict (``pass`` or ``flaky``) and the record of every run it
    took; None when the candidate was rejected or parked. ``first``: a run already made and judged on this commit
    (the window's), with its ``judging`` when known: reused when it judged this one candidate on ``main``, else the
    retry is judged anew."""
    assert merge.sha is not None
    if judging is not None and (judging.main != main or len(judging.members) != 1):
        judging = None
    if judging is None:
        judging = await judge.prepare(ctx, repo, main, [judge.Member(cand, main, merge.sha)])
    if first is None:  # no run yet: the one candidate's first
        first = await judge.run(ctx, repo, judging, "candidate", candidate_id=cand.id, window_width=1)
    state = verdict.Runs(first)
    record: dict[str, Any] = {}
    while True:
        step = verdict.next_step(state, retry_failures=ctx.retry_for(repo))
        if step.action == "land":
            assert step.deciding is not None
            return step.deciding, step.outcome, record
        record.setdefault("first", state.first.as_json())
        if step.action == "retry":
            retry = await judge.run(ctx, repo, judging, "retry", candidate_id=cand.id, again=state.first.run)
            state = verdict.Runs(state.first, retry=retry)
            record["retry"] = retry.as_json()
        elif step.action == "base":
            base = await _base(ctx, repo, cand, main, merge.sha, state.first)
            state = verdict.Runs(state.first, state.retry, base)
            record["base"] = base.as_json()
        else:
            await _refuse(ctx, repo, cand, step, merge.sha, main, record, state.base)
            return None


async def _base(ctx: Context, repo: Repo, cand: Candidate, main: str, merged: str, first: Judged) -> Result:
    """The check's result on main itself, for telling a candidate's failure from main's (``verdict.base_source``)."""
    source = verdict.base_source(red_since=repo.red_since, main=main, merged_sha=merged)
    if source == "known_red":
        return Result(main, "", repo.check_command, "fail", None, 0, repo.paused_reason or "", "", 0, "")
    if source == "same_commit":
        return first.run
    tree = await asyncio.to_thread(compare.tree_of, target_for(ctx, repo).path, main)
    if await ctx.db.jobs.passed_on(repo=repo.name, sha=main, tree=tree, command=repo.check_command):
        return Result(main, "", repo.check_command, "pass", 0, 0, say.KNOWN_GREEN, "", 0, "", "none")
    return await runs.check(ctx, repo, main, "base", candidate_id=cand.id)


async def _refuse(ctx: Context, repo: Repo, cand: Candidate, step: verdict.Step, merged: str, main: str,
                  record: dict[str, Any], base: Result | None) -> None:
    """Reject the candidate (its failure), or park it (main's failure: main turns red, and is mended)."""
    deciding = step.deciding
    assert deciding is not None
    verifier = evidence.verdict_json(deciding, deciding.outcome, record)
    if step.action == "park":
        await postland.red_base(ctx, repo, main, say.base_fails(repo.target_branch, main), base or deciding.run)
        await ctx.db.landing.finish_candidate(cand.id, "parked", say.parked(repo.target_branch, main), base_sha=main,
                                              merged_sha=merged, verifier=verifier, verdict=verdicts.recorded(
                                                  "pre_existing", failing_tests=list(deciding.failing_tests)))
        log.info("parked candidate %s of subtask %s: pre_existing (%s fails on its own)", cand.id, cand.subtask_id,
                 repo.target_branch, extra={"candidate": cand.id, "subtask": cand.subtask_id, "kind": "pre_existing"})
        return
    kind = step.kind
    if kind in ("check_failed", "check_timeout") and (cand.verdict or {}).get("was_flaky"):
        kind = "flaky_then_failed"  # requeued after a flaky pass, and failed when verified again
    rejection = say.Rejection(kind, repo.target_branch, cand.sha, repo.check_command, merged_sha=merged,
                              run=deciding.run, judgement=deciding.judgement, retried="retry" in record)
    await landing.reject(ctx.db, cand, rejection, base_sha=main, verifier=verifier)
