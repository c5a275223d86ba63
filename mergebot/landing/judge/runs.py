"""Asking verifier workers for a run: a verify job for the repository's check on one exact commit.

The queue never runs a check itself: it writes a verify job (``db.jobs``), wakes the in-process workers, and
waits for a worker's result through the waiter. A job that does not finish in three check timeouts plus the
slack, or that finishes without a result, is an ``error`` result, never a pass.

A repository with named checks (``Repo.checks``, issue 43) has its check run as a group (``db.jobs``): one job per
check, claimed by as many workers at once, under a parent whose id is returned, so every caller waits on one job as
before and reads one combined result (``verifier.checks``). Every check gets the repository's setup, caches, sandbox,
limits and report, its own command and timeout (the repository's when it names none); only the first check runs the
candidate's own tests (``sandbox["own"]``). A run given an explicit ``command`` (held-out checks, a post-land
command) stays one job; ``repo.check_command`` given as the command means the repository's check.
"""

from __future__ import annotations

from typing import Any

from mergebot import messages as say
from mergebot.landing.context import Context
from mergebot.landing.target import target_for
from mergebot.models import Job, Repo
from verifier.runner import Result
from verifier.spec import CheckSpec, Setup


def unfinished(repo: Repo, sha: str, why: str) -> Result:
    """The result of a run that gave none: an ``error`` the verifier could not vouch for."""
    return Result(sha, "", repo.check_command, "error", None, 0, why, "", 0, "", "none")


def result_of(repo: Repo, sha: str, job: Job) -> Result:
    if job.status != "done" or not job.result:
        return unfinished(repo, sha, say.job_unfinished(job.id, job.status))
    return Result.from_json(job.result)


def run_limit(ctx: Context, repo: Repo) -> float:
    """How long a run may take before it counts as lost: three check timeouts (a retry and a base check may
    queue behind it) plus the slack."""
    slowest = max([repo.verifier_timeout_s, *(int(c.get("timeout_s") or 0) for c in repo.checks)])
    return slowest * 3 + ctx.slack


WRITES_CACHE = frozenset({"base", "post_land", "baseline"})  # runs on commits already on main: they write a generation


def check_spec(repo: Repo, purpose: str, command: str | None = None) -> CheckSpec:
    """A run's spec (``verifier.spec.CheckSpec``), from the repository's rules: the candidates' check (or
    ``command``), its timeout, sandbox paths and limits, report, setup and caches. Only a run on a commit already on
    main writes a cache generation, and only its setup may use the network (where the repository allows it)."""
    on_main = purpose in WRITES_CACHE
    return CheckSpec(command or repo.verifier_command, repo.verifier_timeout_s, memory_mb=repo.memory_limit_mb,
                     sandbox_paths=tuple(repo.sandbox_paths), disk_limit_mb=repo.disk_limit_mb, report=repo.report,
                     setup=Setup(repo.setup_command, repo.setup_network and on_main) if repo.setup_command else None,
                     cache_paths=tuple(repo.cache_paths), cache_key=tuple(repo.cache_key), cache_write=on_main)


async def start_check(ctx: Context, repo: Repo, sha: str, purpose: str, *, candidate_id: int | None = None,
                      landed_id: int | None = None, command: str | None = None,
                      window_width: int | None = None, sandbox: dict[str, Any] | None = None) -> int:
    """A verify job for ``sha``: the candidates' check, or ``command`` (main's check after a landing);
    ``window_width`` is the speculation window's width, recorded for the charts; ``sandbox``: more of how the run
    starts (the plugins it names, the candidate's own tests: ``mergebot.landing.judge.step``). A forge repository's
    commit goes to its queue branch first, for a worker or replica without this disk (``target.Forge``)."""
    await target_for(ctx, repo).publish(sha, ctx.published)
    group = bool(repo.checks) and command in (None, repo.check_command)
    spec = check_spec(repo, purpose, None if group else command).as_json()
    box = {**spec["sandbox"], **(sandbox or {})}
    children = [{"name": c["name"], "command": c["command"], "required": c["required"],
                 "timeout_s": c.get("timeout_s") or repo.verifier_timeout_s,
                 "sandbox": box if i == 0 else {k: v for k, v in box.items() if k != "own"}}
                for i, c in enumerate(repo.checks)] if group else None
    job = await ctx.db.jobs.enqueue_job(repo=repo.name, commit_sha=sha,
                                        command=repo.check_command if group else spec["command"],
                                        timeout_s=spec["timeout_s"], purpose=purpose,
                                        candidate_id=candidate_id, landed_id=landed_id, cache=spec["cache"],
                                        window_width=window_width, sandbox=box, children=children)
    for wake in ctx.on_job:
        wake.set()
    return job.id


async def check(ctx: Context, repo: Repo, sha: str, purpose: str, *, candidate_id: int | None = None,
                landed_id: int | None = None, command: str | None = None, window_width: int | None = None,
                sandbox: dict[str, Any] | None = None) -> Result:
    """Run the repository's check (or ``command``) on ``sha`` through a verify job and wait for a worker's result."""
    job_id = await start_check(ctx, repo, sha, purpose, candidate_id=candidate_id, landed_id=landed_id,
                               command=command, window_width=window_width, sandbox=sandbox)
    return result_of(repo, sha, await ctx.db.jobs.wait_job(job_id, timeout=run_limit(ctx, repo)))
