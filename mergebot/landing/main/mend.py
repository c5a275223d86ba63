"""A red main that mends itself: when main's check fails after a landing, find the landing that broke it and land
its revert, so the queue waits only as long as the bisection takes and a person need not hunt for the culprit.

Steps (``postland`` calls ``confirm`` and then ``mend`` when a post-land check fails):
  1. the same check runs once more on the same commit: a pass means main is flaky, not red; the landed row says
     ``flaky`` and nothing is reverted (``confirm``);
  2. the suspects are the landings since main's check last passed (``db.landing.since_green``); the newest one is
     known red. Bisection on the verifier (jobs of purpose ``bisect``, main's own check) finds the first red one,
     and each probed landing's row records what its commit gave. One suspect needs no run;
  3. the bot writes the revert of the culprit's change as a real commit on main's head (``git.revert_onto``) and
     queues it first as a candidate of its own subtask that names the landing it reverts
     (``db.landing.queue_revert``). It lands through the queue like any candidate: fenced, verified, by
     compare-and-swap after an intent, with a landed row of kind ``revert``; in the same transaction the culprit's
     subtask goes back to its owner at a new claim version, with the evidence as its reason;
  4. the revert's own post-land check turns main green, which resumes the parked candidates.
It gives up, leaving main red and parked as before (announced, with the reason), when there is no suspect, when a
suspect is a revert already (it never reverts twice), when a bisection run cannot judge, or when the revert does
not apply cleanly any more. A mend that gave up stays given up (``repos.mend_given_up``, main's head then): a
restart does not run its bisection again, until main moves or an admin resumes the repository.
"""

from __future__ import annotations

import asyncio
import logging

from mergebot import messages as say
from mergebot.git import repo as git
from mergebot.landing.context import Context, crash_point
from mergebot.landing.judge import runs, verdict
from mergebot.landing.target import target_for
from mergebot.models import Landed, Repo
from verifier.runner import Result

log = logging.getLogger(__name__)


def next_probe(lo: int, hi: int) -> int | None:
    """The suspect to check next when the first red one is among ``lo``..``hi`` (``hi`` known red); None: found."""
    return None if lo >= hi else (lo + hi) // 2


async def confirm(ctx: Context, repo: Repo, landed: Landed, sha: str, failed: Result) -> bool:
    """Run main's check once more on ``sha``; True when main is red for sure, False when the red was flaky."""
    again = await runs.check(ctx, repo, sha, "bisect", landed_id=landed.id, command=repo.main_check)
    if not again.passed:
        return True
    await ctx.db.landing.set_main_status(landed_id=landed.id, status="flaky")
    await ctx.db.subtasks.announce(author_id=None, body=say.flaky_on_main(repo.name, repo.target_branch, sha,
                                                                         failed.outcome))
    log.info("post-land check of %s at %s was flaky: nothing reverted", repo.name, sha[:12])
    return False


async def resume(ctx: Context, repo: Repo, red: Landed, sha: str) -> None:
    """After a restart or a new leader: mend a confirmed red main again unless a revert is queued for it, or mending
    it at this very commit gave up already."""
    if repo.mend_given_up == sha:
        log.info("main of %s is red at %s and mending it gave up before: it stays given up until main moves or an "
                 "admin resumes the repository", repo.name, sha[:12])
        return
    suspects = await ctx.db.reverts.since_green(repo.name, red.id)
    if await ctx.db.reverts.reverts_queued([s.id for s in suspects]):
        return
    log.info("main of %s is red at %s and its mend was cut short: mending it again", repo.name, sha[:12])
    await mend(ctx, repo, red, sha, runs.unfinished(repo, sha, say.MEND_RESUMED))


async def mend(ctx: Context, repo: Repo, red: Landed, sha: str, failed: Result) -> None:
    """Find the first red landing since main was last green and queue its revert (or announce why not)."""
    why = await _mend(ctx, repo, red, sha, failed)
    if why is not None:
        await ctx.db.reverts.mend_given_up(repo.name, sha)
        log.warning("main of %s stays red at %s: %s", repo.name, sha[:12], why)
        await ctx.db.subtasks.announce(author_id=None, body=say.mend_gave_up(repo.name, repo.target_branch, why))


async def _mend(ctx: Context, repo: Repo, red: Landed, sha: str, failed: Result) -> str | None:
    db = ctx.db
    suspects = await db.reverts.since_green(repo.name, red.id)
    if not suspects:
        return say.MEND_NO_SUSPECTS
    if any(s.kind == "revert" for s in suspects):
        return say.MEND_REVERT_RED
    lo, hi, probes, first_red = 0, len(suspects) - 1, [], failed
    while (mid := next_probe(lo, hi)) is not None:
        probe = suspects[mid]
        got = await runs.check(ctx, repo, probe.merged_sha, "bisect", landed_id=probe.id, command=repo.main_check)
        probes.append((probe.merged_sha, got.outcome))
        if got.outcome not in ("pass", "fail", *verdict.LIMITS):  # a timeout or an error proves nothing
            return say.mend_inconclusive(probe.merged_sha, got.outcome)
        await db.landing.set_main_status(landed_id=probe.id, status=got.outcome)
        if got.passed:
            lo = mid + 1
        else:
            hi, first_red = mid, got
    culprit = suspects[lo]
    sub = await db.subtasks.get_subtask(culprit.subtask_id)
    target = target_for(ctx, repo)
    head = await target.head()
    ref = f"refs/mergebot/reverts/{culprit.id}"
    message = say.revert_message(sub.id, sub.title, culprit.id, culprit.merged_sha, sha, first_red.failing_tests)
    revert = await asyncio.to_thread(lambda: git.revert_onto(git.open_repo(target.path), head, culprit.base_sha,
                                                             culprit.merged_sha, message, ref))
    if revert is None:
        return say.MEND_CONFLICT
    crash_point("before_revert_queued")
    evidence = say.reverted_evidence(sub.id, culprit.claim_version, repo.target_branch, culprit.merged_sha, sha,
                                     first_red.failing_tests, probes, culprit.candidate_sha)
    cand = await db.reverts.queue_revert(repo=repo.name, culprit=culprit, bot_id=await db.agents.bot_id(),
                                         title=say.revert_title(sub.id, sub.title), evidence=evidence, sha=revert,
                                         ref=ref)
    await db.subtasks.announce(author_id=None, body=say.mend_found(repo.name, repo.target_branch, sha, sub.id,
                                                                  culprit.owner, culprit.merged_sha))
    log.info("main of %s is red at %s: reverting subtask %s's landing %s as candidate %s", repo.name, sha[:12],
             sub.id, culprit.merged_sha[:12], cand.id)
    ctx.poke()
    return None
