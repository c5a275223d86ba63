"""Candidates the speculation window judges apart from its chain, while the chain goes on without them.

Three kinds leave the chain to be judged on their own (``mergebot.landing.window.executor`` hands them here):
  * a candidate that failed alone at the head: judged on that run (retry, main's status: ``alone.verify``);
  * a left-out suspect whose rest landed: judged on its failed run, the very tree it now sits on;
  * the candidates of a failed stretch with no clear culprit (planner rule 4b): each merged onto main alone and
    verified there. The culprit is rejected on its own run; one that passes goes back to the queue as passed
    (its estimate for the window's batches is ``planner.PROVEN``) and lands in a later batch.
While a candidate is judged apart, what touches its paths waits for its verdict (lanes: ``Window.busy_paths``).
"""

from __future__ import annotations

import asyncio
import logging

from mergebot import messages as say
from mergebot.landing.context import Context
from mergebot.landing.judge import evidence, verdicts
from mergebot.landing.main import land as landing
from mergebot.landing.target import Target
from mergebot.landing.window import alone, planner
from mergebot.landing.window.chain import Speculation, Window
from mergebot.models import Repo

log = logging.getLogger(__name__)


def start(ctx: Context, repo: Repo, window: Window, slot: Speculation, main: str) -> None:
    """Judge ``slot`` apart on its own merge (and its run, when it has one) while the window goes on."""
    task = asyncio.create_task(_judge(ctx, repo, window, slot, main))
    window.aside[slot.cand.id] = (task, slot.paths)


async def stretch(ctx: Context, repo: Repo, window: Window, target: Target, slots: list[Speculation],
                  main: str) -> None:
    """Rule 4b: each candidate of a failed stretch (already out of the chain) merged onto main alone and judged
    there. One that no longer applies on main is judged as the queue would (``reject_unmergeable``)."""
    for slot in slots:
        merge, paths = await landing.merge_with_paths(ctx.db, target, slot.cand, main)
        if merge.kind in ("conflict", "up-to-date"):
            await landing.reject_unmergeable(ctx.db, target, repo, slot.cand, merge, main)
            continue
        start(ctx, repo, window, Speculation(slot.cand, main, merge, paths=paths), main)
    log.info("judging candidates %s apart on %s: their batch failed with no clear culprit",
             [s.cand.id for s in slots], main[:12], extra={"kind": "judged_apart"})


async def _judge(ctx: Context, repo: Repo, window: Window, slot: Speculation, main: str) -> None:
    """Rejected when the failure is its own; parked when main itself is red. When it passes (a retry after a failure
    on the same commit: flaky; or its first run on main, apart from its failed batch), it goes back to the queue:
    main has moved on since, so it is merged and verified again before it lands."""
    try:
        passed = await alone.verify(ctx, repo, slot.cand, slot.merge, main, first=slot.result, judging=slot.judging)
        window.fail_rate = planner.observe_failure(window.fail_rate, passed is None)
        if passed is not None:
            flaky = slot.result is not None
            if not flaky:
                window.proven.add(slot.cand.id)
            why = await landing.fenced(ctx.db, slot.cand)
            note = say.on_branch(say.FLAKY_REQUEUED if flaky else say.PASSED_APART, repo.target_branch)
            await ctx.db.landing.finish_candidate(
                slot.cand.id, "queued" if why is None else "superseded", note if why is None else why,
                verdict=verdicts.recorded("queued", was_flaky=True, flaky_runs=evidence.runs_json(passed[2]))
                if why is None and flaky else None)
    except Exception:  # never lost: the reconciler requeues a candidate left mid-verification
        log.exception("judging candidate %s apart failed", slot.cand.id)
    finally:
        window.judged(slot.cand.id)
        ctx.poke()
