"""Where a passing run's tests are held to main's: the I/O around ``verifier.compare`` (PASS_TO_PASS).

A check that exits 0 has not yet passed: its tests must keep what main's tests gave (and one that fails only
because pytest found no test at all, exit 5, is judged the same way: an emptied suite is weakened, not broken).
``judge`` runs on every candidate run that passed (the serial queue's first run and retry, every run of the
speculation window), before the verdict policy (``verdict.next_step``) or the planner sees it:

  1. the baseline: the outcomes of the same command on main's tree (``db.jobs.baseline``: the run that landed it,
     a base check, a post-land run of the same command); when none has outcomes, one run on main with purpose
     ``baseline`` (once per tree: concurrent candidates wait for the same run). A baseline without outcomes (not
     a pytest suite, no report) judges nothing;
  2. the change's deleted test definitions, for the tests that passed on main and do not now: each test file's
     text on main and on the merged commit (``verifier.compare.deleted_tests``). A deletion is allowed when the
     member whose own change touches that file belongs to a subtask a lead allowed to remove tests;
  3. ``verifier.compare.compare``, and the subtasks' acceptance tests (``verifier.compare.accepted``). A weakened
     suite, a missing report or an acceptance test that did not pass turns the run's outcome into
     ``tests_weakened``, ``no_report`` or ``acceptance_failed`` (like ``verdict.tree_checked`` turns a run about
     another tree into an ``error``: the runner's own outcome stays on the job), and the comparison is kept on the run
     (``tests.comparison``) for the verdict, the landed record and the pages.

In a batch or a speculative chain the baseline is the main its first member merged onto, and each member's own
change is its merge against the merge before it; a weakened run is a failure like any other, so the planner
bisects it and the culprit is judged alone, with its own permission.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.landing import messages as say
from mergebot.landing import runs
from mergebot.landing.land import Context, target_for
from mergebot.models import Candidate, Repo
from verifier import compare as cmp
from verifier import outcomes
from verifier.runner import Result

log = logging.getLogger(__name__)

_baselines: dict[tuple[str, str, str], asyncio.Lock] = {}
_queued: dict[tuple[str, str, str], int] = {}  # baseline runs queued ahead of need (``prefetch``): their job ids
NO_TESTS = 5  # pytest's exit status when no test was collected


@dataclass(frozen=True)
class Member:
    """One candidate a run covers: merged onto ``base`` (main, or the member ahead's merge) as ``merged``."""

    cand: Candidate
    base: str
    merged: str


async def judge(ctx: Context, repo: Repo, run: Result, *, main: str, members: Sequence[Member]) -> Result:
    """``run`` held to main's tests (see the module's rules); unchanged unless it passed (or collected nothing)
    and main has outcomes."""
    if not (run.passed or _collected_nothing(run)):
        return run
    path = target_for(ctx, repo).path
    main_tree = await asyncio.to_thread(_tree_of, path, main)
    baseline, where = await _baseline(ctx, repo, main, main_tree, run.command)
    now = outcomes.unpack(run.tests)
    accept = [p for ps in (await ctx.db.subtasks.acceptance_paths([m.cand.subtask_id for m in members])).values()
              for p in ps]
    changed = await asyncio.to_thread(_changed, path, main, run.commit_sha, members, set(accept))
    if baseline.none and not accept and not changed:
        return run
    slipped = [t for t, o in baseline.tests.items() if o == "passed" and now.tests.get(t) != "passed"]
    deleted: set[str] = set()
    allowed: set[str] = set()
    if slipped and not now.none:
        deleted, by_file = await asyncio.to_thread(_deleted, path, main, run.commit_sha, slipped, members)
        permitted = await _permitted(ctx, members)
        allowed = {t for t in deleted if by_file.get(cmp.split_id(t)[0]) in permitted}
    result = cmp.compare(baseline, now, deleted=deleted, removal_allowed=allowed, where=where)
    record = result.record()
    record["changed"] = changed
    verdict = result.verdict
    if changed and repo.old_tests in ("refuse", "run") and not verdict:
        behaviour = {m.cand.subtask_id for m in members
                     if (await ctx.db.subtasks.get_subtask(m.cand.subtask_id)).allow_behaviour_change}
        if not behaviour and repo.old_tests == "refuse":
            verdict = "tests_changed"
        elif not behaviour:  # main's version of the edited files, against the candidate's code
            old = await _old_tests(ctx, repo, path, main, run.commit_sha, changed, members[-1].cand.id)
            record["old_tests"] = {"outcome": old.outcome, "failing": list(old.failing_tests[:50])}
            if not old.passed:
                verdict = "tests_changed"
    if accept:
        wrong = cmp.accepted(now, accept) if not now.none else (cmp.Change("(every test)", "attached", "missing"),)
        record["acceptance"] = {"files": sorted(accept), "failed": [{"id": c.id, "now": c.now} for c in wrong]}
        verdict = verdict or ("acceptance_failed" if wrong else "")
    tests = {**(run.tests or {}), "comparison": record}
    return dataclasses.replace(run, tests=tests, outcome=verdict or run.outcome)


async def prefetch(ctx: Context, repo: Repo, main: str) -> None:
    """Queue main's baseline run now, when main's tree has no run of the check yet, so that it runs beside the
    candidate's own run instead of after it (a repository just imported, a main a person moved)."""
    try:
        tree = await asyncio.to_thread(_tree_of, target_for(ctx, repo).path, main)
    except (pygit2.GitError, KeyError, ValueError):
        return
    key = (repo.name, tree, repo.verifier_command)
    if key in _queued or await ctx.db.jobs.baseline(repo=repo.name, tree_sha=tree, command=repo.verifier_command):
        return
    if len(_queued) > 1000:
        _queued.clear()
    _queued[key] = await runs.start_check(ctx, repo, main, "baseline")


def _collected_nothing(run: Result) -> bool:
    """pytest's exit 5: it ran, and found no test at all (a suite emptied by the change is judged like a pass)."""
    return run.outcome == "fail" and run.exit_code == NO_TESTS and (run.tests or {}).get("source") == "pytest"


async def _baseline(ctx: Context, repo: Repo, main: str, tree: str, command: str) -> tuple[outcomes.Outcomes,
                                                                                           dict[str, object]]:
    key = (repo.name, tree, command)
    lock = _baselines.setdefault(key, asyncio.Lock())
    async with lock:
        job = await ctx.db.jobs.baseline(repo=repo.name, tree_sha=tree, command=command)
        if job is None and key in _queued:  # queued when the candidate was merged: it ran beside the candidate's
            await ctx.db.jobs.wait_job(_queued.pop(key), timeout=runs.run_limit(ctx, repo))
            job = await ctx.db.jobs.baseline(repo=repo.name, tree_sha=tree, command=command)
        if job is None:  # no run of this command on main's tree at all: one run, for its outcomes
            log.info("no baseline for %s at %s: running the check on it", repo.name, main[:12])
            got = await runs.check(ctx, repo, main, "baseline", command=command)
            job = await ctx.db.jobs.baseline(repo=repo.name, tree_sha=tree, command=command)
            if job is None:  # it did not finish (an error, a lost worker): nothing to hold the run to
                log.warning("the baseline run on %s of %s gave no outcomes (%s)", main[:12], repo.name, got.outcome)
                return outcomes.Outcomes(problem="the baseline run gave no result"), {"commit": main}
    if len(_baselines) > 1000:
        _baselines.clear()
    where = {"job": job.id, "commit": job.commit_sha, "purpose": job.purpose, "tree": tree}
    return outcomes.unpack((job.result or {}).get("tests")), where


def _tree_of(path: Path, sha: str) -> str:
    return str(git.open_repo(path)[sha].peel(pygit2.Commit).tree_id)


def _text(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> str | None:
    try:
        obj = tree[path]
    except KeyError:
        return None
    if obj.type_str != "blob":
        return None
    data = repo[obj.id].peel(pygit2.Blob).data
    return data.decode("utf-8", "replace") if len(data) <= 2 << 20 else None


def _deleted(path: Path, main: str, merged: str, tests: list[str],
             members: Sequence[Member]) -> tuple[set[str], dict[str, int]]:
    """The tests whose definition the change deletes, and for each test file, the subtask whose own change
    touches it (the last such member)."""
    repo = git.open_repo(path)
    before_tree = repo[main].peel(pygit2.Commit).tree
    after_tree = repo[merged].peel(pygit2.Commit).tree
    files = sorted({cmp.split_id(t)[0] for t in tests})
    before = {f: _text(repo, before_tree, f) for f in files}
    after = {f: _text(repo, after_tree, f) for f in files}
    deleted = cmp.deleted_tests(tests, before, after)
    by_file: dict[str, int] = {}
    wanted = set(files)
    for m in members:
        for p in changes.commit_paths(repo, m.base, m.merged):
            if p in wanted:
                by_file[p] = m.cand.subtask_id
    return deleted, by_file


def _changed(path: Path, main: str, merged: str, members: Sequence[Member], accept: set[str]) -> list[str]:
    """The existing test functions the members' own changes edit (the acceptance tests the bot wrote aside)."""
    repo = git.open_repo(path)
    files = sorted({p for m in members for p in changes.commit_paths(repo, m.base, m.merged)
                    if cmp.is_test_file(p) and p not in accept})
    if not files:
        return []
    before = {f: changes.text_at(repo, main, f) for f in files}
    after = {f: changes.text_at(repo, merged, f) for f in files}
    return cmp.changed_tests(before, after)


async def _old_tests(ctx: Context, repo: Repo, path: Path, main: str, merged: str, changed: list[str],
                     candidate_id: int) -> Result:
    """The check on ``merged`` with main's version of each test file whose tests it edits (``--old-tests run``)."""
    files = sorted({cmp.split_id(t)[0] for t in changed})

    def commit() -> str:
        bare = git.open_repo(path)
        old = [(f, (changes.text_at(bare, main, f) or "").encode()) for f in files]
        return git.commit_with_files(bare, merged, old, say.old_tests_commit(files))

    sha = await asyncio.to_thread(commit)
    return await runs.check(ctx, repo, sha, "old_tests", candidate_id=candidate_id)


async def _permitted(ctx: Context, members: Sequence[Member]) -> set[int]:
    """The members' subtasks a lead allowed to remove tests."""
    out = set()
    for m in members:
        sub = await ctx.db.subtasks.get_subtask(m.cand.subtask_id)
        if sub.allow_test_removal:
            out.add(sub.id)
    return out
