"""Held-out checks: a repository's tests that no agent ever sees, run on every candidate that passed its check.

Rules:
  * An operator stores them (``mergebot repo set NAME --held-out DIR``) in PostgreSQL (``held_out_files``); they
    are never in the repository, and nothing an agent's token reads returns them: not git, the API, MCP, the
    guide, statuses or pages. Only the verifier worker holding a held-out job reads them, fenced by its claim
    (``GET /api/v1/verify-jobs/ID/held-out`` for a remote worker).
  * A candidate run that passed (``judge``; after ``compare.judge``) is followed by a run of its own on the same
    merged commit: purpose ``held_out``, the repository's ``held_out_command`` (default ``python -m pytest -q
    "$VERIFIER_HELD_OUT"``) with the files mounted read-only at ``/held-out`` beside the checkout.
  * A held-out run that fails (or times out, or reaches a limit) makes the candidate's run ``held_out_failed``:
    the agent is told pass or fail and the failing test ids (``summary``), nothing else. One that could not run
    (``error``) is no verdict on the change: the candidate's run becomes an ``error`` too, and is retried.
  * Its log is for reviewers and admins only (``for_viewer`` hides everything else of a held-out run's result
    from other roles, wherever a job is shown).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mergebot.landing import runs
from mergebot.landing.land import Context
from mergebot.models import Repo
from verifier import outcomes
from verifier.runner import Result

SEES_LOGS = frozenset({"reviewer", "admin"})
SHOWN = 50  # failing held-out ids named, at most


def summary(run: Result) -> dict[str, Any]:
    """What an agent may learn of a held-out run: its outcome and the ids of the tests that did not pass."""
    seen = outcomes.unpack(run.tests)
    failing = sorted(t for t, o in seen.tests.items() if o in ("failed", "error")) if not seen.none \
        else list(run.failing_tests)
    return {"outcome": "pass" if run.passed else ("error" if run.outcome == "error" else "fail"),
            "failing": failing[:SHOWN], "failing_count": len(failing)}


async def start(ctx: Context, repo: Repo, run: Result, *, candidate_id: int) -> int | None:
    """The held-out run that follows ``run`` (its job id), when it passed and the repository has held-out checks."""
    if not run.passed or not await ctx.db.landing.held_out_count(repo.name):
        return None
    return await runs.start_check(ctx, repo, run.commit_sha, "held_out", candidate_id=candidate_id,
                                  command=repo.held_out_command)


async def judge(ctx: Context, repo: Repo, run: Result, *, candidate_id: int) -> Result:
    """``run`` followed by the repository's held-out checks on the same commit, when it passed and there are any."""
    job_id = await start(ctx, repo, run, candidate_id=candidate_id)
    if job_id is None:
        return run
    job = await ctx.db.jobs.wait_job(job_id, timeout=runs.run_limit(ctx, repo))
    return combine(run, runs.result_of(repo, run.commit_sha, job))


def combine(run: Result, held: Result) -> Result:
    """The candidate's run with its held-out run's verdict (see the module's rules)."""
    said = summary(held)
    tests = {**(run.tests or {}), "held_out": said}
    if said["outcome"] == "pass":
        return dataclasses.replace(run, tests=tests)
    return dataclasses.replace(run, tests=tests, outcome="error" if said["outcome"] == "error" else "held_out_failed")


def for_viewer(job: dict[str, Any], role: str) -> dict[str, Any]:
    """A job as a viewer of ``role`` may see it: a held-out run's result reduced to ``summary`` for anyone but a
    reviewer or an admin (its log, its tests' names and sources stay with them)."""
    if job.get("purpose") != "held_out" or role in SEES_LOGS:
        return job
    result = job.get("result")
    if isinstance(result, dict):
        try:
            reduced: dict[str, Any] | None = summary(Result.from_json(result))
        except TypeError:
            reduced = {"outcome": job.get("outcome")}
        job = {**job, "result": reduced, "command": "(held-out checks)"}
    return job
