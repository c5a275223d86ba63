"""After a landing: the team check on main's new head (the seeds' "grader on main"), and main's red or green.

Rules:
  * When main moved to exactly the commit whose passing run landed it (same command), that run is the check:
    it is recorded without running it again, which could only measure flakiness (MERGEBOT_POST_LAND_RERUN=1
    runs it anyway). A flaky landing, or a command changed since, gets its own run.
  * Checks are coalesced: a newer head's check cancels the older ones that have not started yet (their rows say
    ``superseded``: main moved on, and its newer head's row carries the status).
  * A failed check is run once more on the same commit: a pass there is a flaky main, recorded as such. A red
    main confirmed is announced and parks the queue (while red only a candidate that passes, a fix, lands), and
    ``mend`` bisects the landings since the last green check and queues the culprit's revert first. A pass on
    main again clears it and requeues the parked candidates.
  * A red main found first by a base check (a candidate judged alone, ``alone``, fails on main too) is
    mended the same way (``red_base``): at once when main's head is a landing whose check is over, or by that
    landing's own post-land check when it fails later (main was red at its commit already).
  * The database going away meanwhile is waited out: the check is asked for again once it is back (found by the
    outage drill, where the task died with its row left ``pending``). A restart resumes the newest landing's
    check if it was cut short.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from mergebot import messages as say
from mergebot.errors import Unavailable
from mergebot.landing.context import Context
from mergebot.landing.judge import runs, verdict
from mergebot.landing.main import mend
from mergebot.models import Landed, Repo
from verifier.runner import Result

log = logging.getLogger(__name__)


def head_of(landed: Landed) -> str:
    """The commit main moved to (a batch's last merge)."""
    return landed.main_sha or landed.merged_sha


def start(ctx: Context, repo: Repo, landed: Landed) -> None:
    _track(ctx, check(ctx, repo, landed))


def _track(ctx: Context, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` beside the queue, held in ``ctx.post_land`` until it ends."""
    task = asyncio.create_task(work)
    ctx.post_land.add(task)
    task.add_done_callback(ctx.post_land.discard)


async def resume(ctx: Context, repo: Repo) -> None:
    """A post-land check cut short by a restart is run again for main's newest landed row; a red main whose mend
    was cut short (no revert queued yet) is mended again."""
    newest = await ctx.db.landing.landed(repo=repo.name, limit=1)
    if newest and newest[0].main_status == "pending":
        start(ctx, repo, newest[0])
    elif newest and newest[0].main_status == "fail" and repo.red_since and newest[0].kind == "land":
        _track(ctx, mend.resume(ctx, repo, newest[0], head_of(newest[0])))


async def check(ctx: Context, repo: Repo, landed: Landed) -> None:
    while True:
        try:
            await _check_once(ctx, repo, landed)
            return
        except Unavailable as e:
            log.warning("post-land check of %s at %s interrupted, will retry: %s", repo.name, head_of(landed)[:12],
                        e.message)
            await asyncio.sleep(ctx.poll)


def _covered(ctx: Context, repo: Repo, landed: Landed) -> Result | None:
    """The landing's own passing run on main's new head, when it is the post-land check's answer already."""
    if not verdict.post_land_covered(rerun=ctx.post_land_rerun, landed_result=landed.verifier_result,
                                     landed_command=landed.verifier_command, command=repo.main_check):
        return None
    return Result(head_of(landed), landed.tree_sha if landed.batch_size == 1 else "", landed.verifier_command, "pass",
                  0, landed.duration_ms, say.LANDING_RUN_COVERS, "", 0, landed.log_digest)


async def _check_once(ctx: Context, repo: Repo, landed: Landed) -> None:
    db, sha = ctx.db, head_of(landed)
    await db.jobs.cancel_older_post_land(repo.name, landed.id)  # main's newer head answers for them
    result = _covered(ctx, repo, landed)
    if result is None:
        job_id = await runs.start_check(ctx, repo, sha, "post_land", landed_id=landed.id, command=repo.main_check)
        done = await db.jobs.wait_job(job_id, timeout=runs.run_limit(ctx, repo))
        if done.status == "cancelled":
            await db.landing.set_main_status(landed_id=landed.id, status="superseded")
            return
        result = runs.result_of(repo, sha, done)
    current = await db.repos.get_repo(repo.name)
    change = verdict.main_change(passed=result.passed, red=bool(current.red_since), red_here=current.red_since == sha)
    if change == "red" and not await mend.confirm(ctx, current, landed, sha, result):
        return  # flaky: the run again passed, and the row says so
    await db.landing.set_main_status(landed_id=landed.id, status=result.outcome)
    if change == "green":
        await db.repos.set_red(repo=repo.name, sha=None, reason=None)
        await db.subtasks.announce(author_id=None, body=say.green_again(repo.name, repo.target_branch, sha))
        ctx.poke()
    elif change == "red":
        await red_main(ctx, current, sha, say.post_land_failed(result.outcome))
        await mend.mend(ctx, current, landed, sha, result)


async def red_base(ctx: Context, repo: Repo, main: str, why: str, base: Result) -> None:
    """A base check (``alone``) failed on main at ``main``: main is red (the queue parks), and it is mended as a
    red post-land check would be, with ``base`` as the run that found it. Not when main was red already (its mend
    is under way), when the landing's own post-land check has not ended (it mends when it fails: ``red_here``), or
    when main is not a landing's head (moved outside the queue: there is nothing of ours to bisect)."""
    was_red = repo.red_since
    await red_main(ctx, repo, main, why)
    newest = await ctx.db.landing.landed(repo=repo.name, limit=1)
    if was_red or not newest or head_of(newest[0]) != main or newest[0].main_status in ("pending", "fail"):
        return
    log.info("main of %s failed its check as a candidate's base at %s: mending it", repo.name, main[:12])
    await ctx.db.landing.set_main_status(landed_id=newest[0].id, status=base.outcome)
    _track(ctx, mend.mend(ctx, repo, newest[0], main, base))


async def red_main(ctx: Context, repo: Repo, sha: str, why: str) -> None:
    """Main is red at ``sha``: say so once, and park the queue (only a fix lands)."""
    if repo.red_since:
        return
    reason = say.red_main(repo.target_branch, sha, why)
    await ctx.db.repos.set_red(repo=repo.name, sha=sha, reason=reason)
    repo.red_since, repo.paused_reason = sha, reason
    await ctx.db.subtasks.announce(author_id=None, body=say.red_main_announcement(repo.name, reason))
