"""Holding a judging run's tests to main's: the I/O around ``verifier.compare`` (PASS_TO_PASS, FAIL_TO_PASS).

A check that exits 0 has not yet passed: its tests must keep what main's tests gave (and one that fails only
because pytest found no test at all, exit 5, is judged the same way: an emptied suite is weakened, not broken).
``hold`` runs on every judging run that passed (``mergebot.landing.judge.step``), in this order:

  1. the baseline: the outcomes of the same command on main's tree (``db.jobs.baseline``: the run that landed it,
     with its own tests' outcomes for the files they ran, a base check, a post-land run of the same command); when
     none has outcomes, one run on main with purpose ``baseline`` (once per tree: concurrent candidates wait for the
     same run). A baseline without outcomes (not a pytest suite, no report) judges nothing;
  2. the tests whose definition what would land deletes (each test file's text on main and on the merged commit,
     ``verifier.compare.deleted_tests``): allowed only when the member whose own change touches that file belongs
     to a subtask a lead allowed to remove tests;
  3. ``verifier.compare.compare``, and the subtasks' acceptance tests (``verifier.compare.accepted``): a weakened
     suite, a missing report or an acceptance test that did not pass is ``tests_weakened``, ``no_report`` or
     ``acceptance_failed``; an outcome report past the verifier's bounds is ``report_flood``;
  4. the existing tests the change edits (``changed``: edited test functions, and names a test file rebinds at
     module level), named for reviewers; a repository that refuses them (``--old-tests refuse``) makes the run
     ``tests_changed`` unless a lead marked the subtask as changing behaviour. Main's version of every edited test
     file is what ran (the reset), so an edit cannot pass a test by changing it.

In a batch or a speculative chain the baseline is the main its first member merged onto, and each member's own
change is its merge against the merge before it; a judged failure is a failure like any other, so the planner
bisects it and the culprit is judged alone, with its own permission.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.landing.context import Context
from mergebot.landing.judge import runs
from mergebot.landing.target import target_for
from mergebot.models import Job, Repo
from verifier import compare as cmp
from verifier import outcomes
from verifier.runner import Result

if TYPE_CHECKING:
    from mergebot.landing.judge.step import Judging, Member

log = logging.getLogger(__name__)

_baselines: dict[tuple[str, str, str], asyncio.Lock] = {}
_queued: dict[tuple[str, str, str], int] = {}  # baseline runs queued ahead of need (``prefetch``): their job ids
_plugins: dict[tuple[str, str], list[str]] = {}  # what main's runs loaded, per check
_held: dict[tuple[tuple[str, str, str], int], outcomes.Outcomes] = {}  # baselines already read, by tree and job


async def hold(ctx: Context, repo: Repo, run: Result, judging: Judging) -> tuple[str, dict[str, Any]]:
    """The judged kind ("" when the run holds up) and the comparison's record, for a run that passed (or collected
    nothing); ("", {}) when there is nothing to hold it to."""
    now = outcomes.unpack(run.tests)
    path = target_for(ctx, repo).path
    main_tree = await asyncio.to_thread(tree_of, path, judging.main)
    baseline, where = await baseline_of(ctx, repo, judging.main, main_tree, run.command)
    accept = list(judging.accept)
    changed, changed_by = await asyncio.to_thread(_changed, path, judging.main, judging.merged, judging.members,
                                                  set(accept))
    if baseline.none and not accept and not changed:
        return "", {}
    passed_before = [t for t, o in baseline.tests.items() if o == "passed"]
    deleted: set[str] = set()
    allowed: set[str] = set()
    if passed_before:
        deleted, by_file = await asyncio.to_thread(_deleted, path, judging.main, judging.merged, passed_before,
                                                   judging.members)
        if deleted:
            permitted = await _permitted(ctx, judging.members)
            allowed = {t for t in deleted if by_file.get(cmp.split_id(t)[0]) in permitted}
    result = cmp.compare(baseline, now, deleted=deleted, removal_allowed=allowed, where=where)
    record = result.record()
    record["changed"] = changed
    kind = result.verdict
    if changed and repo.old_tests == "refuse" and not kind:  # each edited file's own subtask must be allowed
        for sid in {changed_by[cmp.split_id(t)[0]] for t in changed if cmp.split_id(t)[0] in changed_by}:
            if not (await ctx.db.subtasks.get_subtask(sid)).allow_behaviour_change:
                kind = "tests_changed"
    if accept:
        wrong = cmp.accepted(now, accept) if not now.none else (cmp.Change("(every test)", "attached", "missing"),)
        record["acceptance"] = {"files": sorted(accept), "failed": [{"id": c.id, "now": c.now} for c in wrong]}
        kind = kind or ("acceptance_failed" if wrong else "")
    return kind, record


async def prefetch(ctx: Context, repo: Repo, main: str) -> None:
    """Queue main's baseline run now, when main's tree has no run of the check yet, so that it runs beside the
    candidate's own run instead of after it (a repository just imported, a main a person moved)."""
    try:
        tree = await asyncio.to_thread(tree_of, target_for(ctx, repo).path, main)
    except (pygit2.GitError, KeyError, ValueError):
        return
    key = (repo.name, tree, repo.check_command)
    if key in _queued or await ctx.db.jobs.baseline(repo=repo.name, tree_sha=tree, command=repo.check_command):
        return
    if len(_queued) > 1000:
        _queued.clear()
    _queued[key] = await runs.start_check(ctx, repo, main, "baseline")


ON_MAIN = frozenset({"baseline", "base", "post_land"})  # runs of main's own code: what they loaded, main loads


async def plugins_for(ctx: Context, repo: Repo) -> list[str] | None:
    """The entry-point plugins a judging run names (``verifier.outcomes.start_env``): those the newest run of the
    check on main's own code loaded (never a candidate's run: its code could report anything); None when no such run
    has said yet."""
    key = (repo.name, repo.check_command)
    if key not in _plugins:
        job = await ctx.db.jobs.newest_on_main(repo=repo.name, command=repo.check_command, purposes=sorted(ON_MAIN))
        known = outcomes.unpack((job.result or {}).get("tests")).plugins if job is not None else None
        if known is None:
            return None
        _plugins[key] = known
    return _plugins[key]


def suite(job: Job) -> outcomes.Outcomes:
    """The outcomes a job gives for the whole suite of the tree it covers (``job_finish`` records a job whose own tests
    ran under the merged tree): the judging run's, with the candidate's own tests' outcomes for exactly the files
    they were asked to run (or all of them, when the run apart was the whole suite)."""
    result = job.result or {}
    got = outcomes.unpack(result.get("tests"))
    own, spec = result.get("own"), (job.sandbox or {}).get("own")
    if got.none or not isinstance(own, dict) or own.get("outcome") != "pass" or not isinstance(spec, dict):
        return got
    extra = outcomes.unpack(own.get("tests"))
    if extra.none:
        return got
    if spec.get("whole"):
        return extra
    files = {str(f) for f in spec.get("files") or []}
    got.tests = {**{t: o for t, o in got.tests.items() if cmp.split_id(t)[0] not in files},
                 **{t: o for t, o in extra.tests.items() if cmp.split_id(t)[0] in files}}
    return got


async def collected(ctx: Context, repo: Repo, main_tree: str) -> set[str]:
    """The test files main's own run of the check collected on this tree, and the ``__init__.py`` of their folders:
    test paths whatever the globs say (none when no run on this tree is known yet)."""
    job = await ctx.db.jobs.baseline(repo=repo.name, tree_sha=main_tree, command=repo.check_command)
    if job is None:
        return set()
    files = {cmp.split_id(t)[0] for t in suite(job).tests}
    out = {f for f in files if f.endswith(".py") and not f.startswith(("/", "../"))}
    for f in list(out):
        parts = f.split("/")[:-1]
        out.update("/".join([*parts[:i], "__init__.py"]) for i in range(len(parts) + 1))
    return out


async def baseline_of(ctx: Context, repo: Repo, main: str, tree: str,
                      command: str) -> tuple[outcomes.Outcomes, dict[str, object]]:
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
    found = _held.get((key, job.id))
    if found is None:
        found = await asyncio.to_thread(defined, target_for(ctx, repo).path, main, suite(job))
        if len(_held) > 100:
            _held.clear()
        _held[(key, job.id)] = found
    if found.plugins is not None and job.purpose in ON_MAIN:
        _plugins[(repo.name, command)] = found.plugins
    return found, where


def defined(path: Path, main: str, found: outcomes.Outcomes) -> outcomes.Outcomes:
    """``found`` without the passing tests that name nothing defined on ``main`` (a run of a candidate's code may have
    reported tests that do not exist: as a baseline they would hold every later candidate to them)."""
    repo = git.open_repo(path)
    defs: dict[str, set[tuple[str, ...]] | None] = {}
    keep = {}
    for test, outcome in found.tests.items():
        file, names = cmp.split_id(test)
        if outcome == "passed" and file.endswith(".py") and names:
            if file not in defs:
                text = changes.text_at(repo, main, file)
                defs[file] = cmp.definitions(text) if text is not None else set()
            known = defs[file]
            if known is not None and names not in known:
                continue
        keep[test] = outcome
    found.tests = keep
    return found


def tree_of(path: Path, sha: str) -> str:
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
             members: tuple[Member, ...]) -> tuple[set[str], dict[str, int]]:
    """The tests whose definition what would land deletes (only files the members' changes touch are read), and for
    each such file, the subtask whose own change touches it (the last such member)."""
    repo = git.open_repo(path)
    by_file: dict[str, int] = {}
    for m in members:
        for p in changes.commit_paths(repo, m.base, m.merged):
            by_file[p] = m.cand.subtask_id
    files = sorted({cmp.split_id(t)[0] for t in tests} & set(by_file))
    if not files:
        return set(), {}
    before_tree = repo[main].peel(pygit2.Commit).tree
    after_tree = repo[merged].peel(pygit2.Commit).tree
    before = {f: _text(repo, before_tree, f) for f in files}
    after = {f: _text(repo, after_tree, f) for f in files}
    return cmp.deleted_tests([t for t in tests if cmp.split_id(t)[0] in by_file], before, after), by_file


def _changed(path: Path, main: str, merged: str, members: tuple[Member, ...],
             accept: set[str]) -> tuple[list[str], dict[str, int]]:
    """The existing tests the members' own changes edit (the acceptance tests the bot wrote aside), and for each test
    file, the subtask whose own change touches it (the last such member)."""
    repo = git.open_repo(path)
    by_file: dict[str, int] = {}
    for m in members:
        for p in changes.commit_paths(repo, m.base, m.merged):
            if cmp.is_test_file(p) and p not in accept:
                by_file[p] = m.cand.subtask_id
    if not by_file:
        return [], {}
    before = {f: changes.text_at(repo, main, f) for f in sorted(by_file)}
    after = {f: changes.text_at(repo, merged, f) for f in sorted(by_file)}
    return cmp.changed_tests(before, after), by_file


async def _permitted(ctx: Context, members: tuple[Member, ...]) -> set[int]:
    """The members' subtasks a lead allowed to remove tests."""
    out = set()
    for m in members:
        sub = await ctx.db.subtasks.get_subtask(m.cand.subtask_id)
        if sub.allow_test_removal:
            out.add(sub.id)
    return out
