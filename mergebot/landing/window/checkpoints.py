"""The window's runs: started on a slot (``start``: a checkpoint, which covers every unchecked slot ahead of it),
and read back once per step, before the planner decides (``collect``): results that are in (judged, then held out:
``mergebot.landing.judge``), runs that overran their limit (an unfinished result), cancelled runs, and whether each
slot's candidate still holds its fence (a newer push or a reclaim withdraws it: the planner cuts it).

A candidate back from waiting for its approval (``mergebot.landing.main.approve``) that runs alone on exactly the
tree its passing run checked (main has not moved since) is not run again: that run is its checkpoint
(``approved_run``), read back like any other, and the gate lets it land.
"""

from __future__ import annotations

import asyncio

from mergebot import messages as say
from mergebot.landing.context import Context
from mergebot.landing.judge import runs
from mergebot.landing.judge import step as judging
from mergebot.landing.main import land as landing
from mergebot.landing.window.chain import Speculation, Window
from mergebot.models import Repo
from mergebot.models.judgement import Judged
from verifier.runner import Result


async def start(ctx: Context, repo: Repo, window: Window, slot: Speculation) -> None:
    """Queue a run on ``slot``'s merge (with main's tests: ``judge``); it covers every unchecked slot ahead of it,
    and says so (``covers``: the batch it is started for, which the fleet bench splits its verifier-seconds over;
    the cost view still charges the candidate it names)."""
    assert slot.merge.sha is not None
    upto = next(i for i, s in enumerate(window.slots) if s is slot) + 1
    members = [judging.Member(s.cand, s.base, s.merge.sha or "") for s in window.slots[:upto]]
    slot.judging = await judging.prepare(ctx, repo, window.slots[0].base, members)
    reused = await approved_run(ctx, slot) if upto == 1 else None
    checked = max((i + 1 for i, s in enumerate(window.slots[:upto - 1]) if s.checkpoint), default=0)
    batch = [s.cand.id for s in window.slots[checked:upto]]
    slot.job_id = reused or await judging.start(ctx, repo, slot.judging, "candidate", candidate_id=slot.cand.id,
                                                window_width=window.width, covers=batch if len(batch) > 1 else None)
    slot.result = slot.held_for = slot.held_job_id = None
    slot.started = asyncio.get_running_loop().time()


async def approved_run(ctx: Context, slot: Speculation) -> int | None:
    """The passing run an approved candidate waited with, when it checked the very tree this slot's run would
    (the same merge on the same main, with main's tests): its job id (a group's, never one check's); None when it must
    run again."""
    if (slot.cand.verdict or {}).get("kind") != "awaiting_approval" or slot.judging is None:
        return None
    for job in await ctx.db.jobs.jobs(candidate_id=slot.cand.id, limit=20):
        if job["purpose"] in ("candidate", "retry") and job["status"] == "done" and job["outcome"] == "pass" \
                and job.get("parent_id") is None and (job["result"] or {}).get("tree_sha") == slot.judging.tree:
            return int(job["id"])
    return None


async def collect(ctx: Context, repo: Repo, window: Window) -> None:
    """Results that are in, runs that overran, and whether each slot is still wanted."""
    db = ctx.db
    now = asyncio.get_running_loop().time()
    limit = runs.run_limit(ctx, repo)
    jobs = await db.jobs.get_jobs([s.held_job_id or s.job_id for s in window.slots
                                   if s.job_id is not None and s.result is None])
    fence_of = await landing.fences(db, [s.cand for s in window.slots if s.valid])
    for slot in window.slots:
        if slot.held_job_id is not None and slot.result is None and slot.held_for is not None:
            held = jobs[slot.held_job_id]
            if held.status in ("done", "cancelled") or now - slot.started > limit:
                slot.result = await judging.held_finished(ctx, repo, slot.held_for, held)
                slot.held_job_id = slot.held_for = None
        elif slot.job_id is not None and slot.result is None and slot.judging is not None:
            job = jobs[slot.job_id]
            if job.status == "done" and job.result:
                got, slot.held_job_id = await judging.finished(ctx, repo, slot.judging, Result.from_json(job.result),
                                                               candidate_id=slot.cand.id)
                if slot.held_job_id is None:
                    slot.result = got
                else:
                    slot.held_for = got
            elif job.status == "cancelled":
                slot.valid = False
            elif now - slot.started > limit:
                slot.result = Judged.as_run(runs.unfinished(repo, slot.merge.sha or "",
                                                            say.job_unfinished(slot.job_id)))
        if slot.valid:
            slot.valid = fence_of[slot.cand.id] is None
