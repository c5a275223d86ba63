"""The serial queue: one candidate at a time, each step its own function.

  1. take   — the next queued candidate, highest priority then arrival; it must still be what its subtask
              waits on (same owner, claim version and sha), else it is superseded (``land.take``);
  2. merge  — onto the current main, in memory; a conflict rejects it with the paths and the subtask goes
              back to running for the same owner;
  3. verify — main's tests on the merged commit's code, and the candidate's own tests apart, run by a verifier
              worker and judged (``mergebot.landing.judge``), then retried, and compared with main as
              ``mergebot.landing.verdict`` decides: landed (pass or flaky), rejected (the failure is the
              candidate's), or parked (the failure is main's: main turns red and is mended like a red post-land
              check, ``postland.red_base``);
  4. land   — the intent, main moved by compare-and-swap (or a guarded push to the forge), the landed row
              (``mergebot.landing.land``); then main's post-land check (``mergebot.landing.postland``).
While main is red the speculation window runs this path too: a fix is judged against main itself.
"""

from __future__ import annotations

from mergebot.landing import alone, postland
from mergebot.landing import land as landing
from mergebot.landing.context import Context, crash_point
from mergebot.landing.judge import step as judge
from mergebot.landing.target import target_for
from mergebot.models import Candidate, Repo


async def process_next(ctx: Context, repo: Repo) -> Candidate | None:
    """Take, merge, verify and land the next candidate; the candidate taken (None when none was queued)."""
    cand = await landing.take(ctx, repo)
    if cand is None:
        return None
    target = target_for(ctx, repo)
    main = await target.head()
    merged = await alone.merge(ctx, repo, target, cand, main)
    if merged is None:
        return cand
    await judge.prefetch(ctx, repo, main)
    passed = await alone.verify(ctx, repo, cand, merged, main)
    if passed is None:
        return cand
    crash_point("after_verify")
    landed = await landing.land(ctx, target, cand, main, merged, *passed)
    if landed is not None:
        postland.start(ctx, repo, landed)
    return cand
