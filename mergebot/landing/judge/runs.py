"""Asking verifier workers for a run: a verify job for the repository's check on one exact commit.

The queue never runs a check itself: it writes a verify job (``db.jobs``), wakes the in-process workers, and
waits for a worker's result through the waiter. A job that does not finish in three check timeouts plus the
slack, or that finishes without a result, is an ``error`` result, never a pass.

A repository with named checks (``Repo.checks``, issue 43) has its check run as a group (``db.jobs``): one job per
check, claimed by as many workers at once, under a parent whose id is returned, so every caller waits on one job as
before and reads one combined result (``verifier.checks``). Every check gets the repository's sandbox and limits,
its own command, and its own timeout, setup, caches (a line of generations of its own) and report where it gives
them (the repository's where it does not: ``check_spec``); only the first check runs the candidate's own tests
(``sandbox["own"]``). A group's retry re-runs only the required checks that did not pass: the others keep their
first result (``kept_checks``), copied into the retry's group. A run given an explicit ``command`` (held-out checks,
a post-land command) stays one job; ``repo.check_command`` given as the command means the repository's check.
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


def check_spec(repo: Repo, purpose: str, command: str | None = None,
               named: dict[str, Any] | None = None) -> CheckSpec:
    """A run's spec (``verifier.spec.CheckSpec``), from the repository's rules: the candidates' check (or
    ``command``), its timeout, sandbox paths and limits, report, setup and caches. Only a run on a commit already on
    main writes a cache generation, and only its setup may use the network (where the repository allows it).
    ``named``: one of the repository's named checks (``rules.check_checks``): its command, and its own timeout,
    setup, caches and report where it gives them (the repository's where it does not), with a line of cache
    generations of its own."""
    on_main = purpose in WRITES_CACHE
    own = named or {}

    def rule(key: str, default: Any) -> Any:
        return default if own.get(key) is None else own[key]

    setup = rule("setup", repo.setup_command)
    return CheckSpec(own["command"] if named else command or repo.verifier_command,
                     rule("timeout_s", repo.verifier_timeout_s), memory_mb=repo.memory_limit_mb,
                     sandbox_paths=tuple(repo.sandbox_paths), disk_limit_mb=repo.disk_limit_mb,
                     report=rule("report", repo.report),
                     setup=Setup(setup, repo.setup_network and on_main) if setup else None,
                     cache_paths=tuple(rule("cache_paths", repo.cache_paths)),
                     cache_key=tuple(rule("cache_key", repo.cache_key)), cache_write=on_main,
                     cache_scope=own.get("name") or "")


def _child(repo: Repo, purpose: str, named: dict[str, Any], box: dict[str, Any], *, first: bool,
           kept: int | None) -> dict[str, Any]:
    """One check's job in a group: its own spec (``check_spec``), the run's ``box`` (the own tests: the first check's
    only) with its own report; ``kept``: the job whose result it keeps (a retry re-runs only what failed)."""
    spec = check_spec(repo, purpose, named=named).as_json()
    sandbox = {**(box if first else {k: v for k, v in box.items() if k != "own"}), "report": spec["sandbox"]["report"]}
    return {"name": named["name"], "command": spec["command"], "required": named["required"],
            "timeout_s": spec["timeout_s"], "sandbox": sandbox, "cache": spec["cache"], "kept": kept}


def kept_checks(repo: Repo, sha: str, first: Result | None) -> dict[str, int]:
    """For a retry of a group on ``sha`` after ``first`` (a run of the same group on the same commit): the checks
    that keep their first result, by name (their job): every check but the required ones that did not pass (issue 43:
    a flaky check is re-run alone). None kept when ``first`` is not such a run."""
    if first is None or first.commit_sha != sha or not repo.checks or not first.checks:
        return {}
    ran = {str(c.get("name")): c for c in first.checks if isinstance(c, dict)}
    if set(ran) != {c["name"] for c in repo.checks} or any(not isinstance(c.get("job"), int) for c in ran.values()):
        return {}
    return {c["name"]: int(ran[c["name"]]["job"]) for c in repo.checks
            if not c["required"] or ran[c["name"]].get("outcome") == "pass"}


async def start_check(ctx: Context, repo: Repo, sha: str, purpose: str, *, candidate_id: int | None = None,
                      landed_id: int | None = None, command: str | None = None,
                      window_width: int | None = None, sandbox: dict[str, Any] | None = None,
                      kept: dict[str, int] | None = None, covers: list[int] | None = None) -> int:
    """A verify job for ``sha``: the candidates' check, or ``command`` (main's check after a landing);
    ``window_width`` is the speculation window's width, recorded for the charts; ``sandbox``: more of how the run
    starts (the plugins it names, the candidate's own tests: ``mergebot.landing.judge.step``). A forge repository's
    commit goes to its queue branch first, for a worker or replica without this disk (``target.Forge``). ``kept``
    (a group's retry: ``kept_checks``): the checks whose result is copied from a job of their own, never run again.
    ``covers``: the candidates the run is started for, when more than ``candidate_id`` (a window's batch)."""
    await target_for(ctx, repo).publish(sha, ctx.published)
    group = bool(repo.checks) and command in (None, repo.check_command)
    spec = check_spec(repo, purpose, None if group else command).as_json()
    box = {**spec["sandbox"], **(sandbox or {})}
    children = [_child(repo, purpose, c, box, first=i == 0, kept=(kept or {}).get(c["name"]))
                for i, c in enumerate(repo.checks)] if group else None
    job = await ctx.db.jobs.enqueue_job(repo=repo.name, commit_sha=sha,
                                        command=repo.check_command if group else spec["command"],
                                        timeout_s=spec["timeout_s"], purpose=purpose,
                                        candidate_id=candidate_id, landed_id=landed_id, cache=spec["cache"],
                                        window_width=window_width, sandbox=box, children=children,
                                        covers=covers)
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
