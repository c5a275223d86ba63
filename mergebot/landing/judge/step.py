"""The one judgement of a candidate's code: which commit its checks run on, how they start, what their results come
to. The serial queue, the speculation window and every candidate judged apart go through here, first run and
retry alike.

  1. ``prepare``: the commit the checks judge (``Judging``): the merged commit with its test paths reset to main's
     (``reset``; a commit of its own on the merged one, on no ref, the same for the same inputs), the candidate's
     own test modules, and the entry-point plugins main's own run of the check loaded;
  2. ``start``: one verify job: the judging run on that commit, then, in the same job and checkout, the candidate's
     own tests on the merged commit (``verifier.runner``: ``own``);
  3. ``judge``: the worker's result must be about the judged tree (and its own run about the merged tree: anything
     else is an ``error``); a judging run that passed is held to main's tests (``compare.hold``); then the own tests
     must have passed (the run that decides is then theirs: ``fail``, ``timeout``, a limit); the ``Judgement``;
  4. the held-out checks (``heldout``), on the judged commit, started the same way, for a run that passed.
``run`` is the four in a row, for a caller that waits (``mergebot.landing.window.alone``); the window, which polls its
jobs, takes the same steps one job at a time (``finished``: 3 then 4; ``held_finished``): the sequence exists here
only.

A judgement (``mergebot.models.judgement``) is a typed record beside the run, never written into it: its kind is
``pass``, the runner's own (``fail``, ``timeout``, ``error``, ``disk_limit``, ``memory_limit``) or a judged kind
(``verdict.JUDGED``). ``judge`` returns the deciding run, untouched, with it (``Judged``): what the verdict policy,
the messages, the landed record and the pages read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from mergebot import messages as say
from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.landing.context import Context
from mergebot.landing.judge import compare, heldout, reset, runs, verdict
from mergebot.landing.target import target_for
from mergebot.models import Candidate, Job, Repo
from mergebot.models.judgement import Comparison, Judged, Judgement
from verifier import compare as cmp
from verifier import outcomes
from verifier.runner import Result

prefetch = compare.prefetch  # main's baseline run, queued ahead of need


@dataclass(frozen=True)
class Member:
    """One candidate a run covers: merged onto ``base`` (main, or the member ahead's merge) as ``merged``."""

    cand: Candidate
    base: str
    merged: str


@dataclass(frozen=True)
class Judging:
    """What one judging run is about: the merge that would land, and the commit its checks run on."""

    main: str  # the main its first member merged onto: the baseline's
    members: tuple[Member, ...]
    merged: str  # the commit that would land
    merged_tree: str
    sha: str  # the commit the checks judge: ``merged`` with main's tests (``merged`` itself when nothing differs)
    tree: str
    reset: reset.Reset
    accept: tuple[str, ...] = ()  # the members' acceptance tests (written into the merge)
    plugins: tuple[str, ...] | None = None  # the entry-point plugins main's run loaded (None: not known yet)

    def spec(self) -> dict[str, Any]:
        """How the job's runs start (the ``sandbox`` a worker reads): the plugins, and the own tests, if any."""
        out: dict[str, Any] = {"plugins": list(self.plugins) if self.plugins is not None else None}
        if self.reset.own or self.reset.whole:
            out["own"] = {"commit": self.merged, "files": list(self.reset.own), "whole": self.reset.whole}
        return out


async def prepare(ctx: Context, repo: Repo, main: str, members: Sequence[Member]) -> Judging:
    """The judging of ``members`` (the last one's merge is what would land) on ``main``."""
    path = target_for(ctx, repo).path
    ids = [m.cand.subtask_id for m in members]
    facts = await ctx.db.subtasks.judging(ids)  # one query for the whole prefix, not one per member
    accept = tuple(sorted({p for f in facts.values() for p in f["acceptance"]}))
    # a subtask gone meanwhile is allowed nothing (its candidate no longer holds its fence: the window cuts it)
    allowed = {sid: reset.Allowed(f["allow_behaviour_change"], f["allow_test_removal"], f["allow_check_changes"])
               if (f := facts.get(sid)) is not None else reset.Allowed() for sid in set(ids)}
    plugins = await compare.plugins_for(ctx, repo)
    extra = await compare.collected(ctx, repo, await asyncio.to_thread(compare.tree_of, path, main))
    merged = members[-1].merged
    made = await asyncio.to_thread(_judged, path, repo, main, merged, tuple(members), accept, allowed, extra)
    return Judging(main, tuple(members), merged, *made, accept=accept,
                   plugins=tuple(plugins) if plugins is not None else None)


def _judged(path: Path, repo: Repo, main: str, merged: str, members: tuple[Member, ...], accept: tuple[str, ...],
            allowed: dict[int, reset.Allowed], extra: set[str]) -> tuple[str, str, str, reset.Reset]:
    """(merged tree, judged commit, judged tree, the reset)."""
    bare = git.open_repo(path)
    by_path: dict[str, int] = {}
    for m in members:
        for p in changes.commit_paths(bare, m.base, m.merged):
            by_path[p] = m.cand.subtask_id
    found = []
    for p, status in changes.tree_changes(bare, main, merged):
        if not (reset.matches(p, repo.test_paths) or p in extra):
            continue
        sid = by_path.get(p)
        trimmed = False
        if status == "modified" and sid is not None and allowed.get(sid, reset.Allowed()).removal:
            before, after = changes.text_at(bare, main, p), changes.text_at(bare, merged, p)
            trimmed = before is not None and after is not None and cmp.only_deletes(before, after)
        found.append(reset.Change(p, status, sid, trimmed))
    plan = reset.plan(found, globs=repo.test_paths, accept=accept, allowed=allowed, check_config=repo.check_config,
                      extra=extra)
    merged_tree = str(bare[merged].peel(pygit2.Commit).tree_id)
    if not plan.needed:
        return merged_tree, merged, merged_tree, plan
    sha, tree = git.commit_with_paths_of(bare, merged, main, plan.restore, plan.drop,
                                         say.judged_commit(merged, plan.restore, plan.drop))
    return merged_tree, sha, tree, plan


async def start(ctx: Context, repo: Repo, judging: Judging, purpose: str, *, candidate_id: int,
                window_width: int | None = None, again: Result | None = None,
                covers: list[int] | None = None) -> int:
    """The job of a judging run (and of the candidate's own tests after it): its id. ``again``: the run this one
    retries (named checks: only its required checks that did not pass run again, ``runs.kept_checks``);
    ``covers``: the candidates it is started for, when more than ``candidate_id`` (a window's batch)."""
    return await runs.start_check(ctx, repo, judging.sha, purpose, candidate_id=candidate_id,
                                  window_width=window_width, sandbox=judging.spec(),
                                  kept=runs.kept_checks(repo, judging.sha, again), covers=covers)


async def judge(ctx: Context, repo: Repo, judging: Judging, run: Result) -> Judged:
    """What a finished job's result comes to (see the module's rules), before the held-out checks."""
    record = judging.reset.record()
    reset = record if record.get("restored") or record.get("dropped") or record.get("kept") else None

    def judged(kind: str, deciding: Result, comparison: dict[str, Any] | None = None,
               own: dict[str, Any] | None = None) -> Judged:
        return Judged(deciding, Judgement(kind, Comparison.from_json(comparison), None, own, reset))

    own = Result.from_json(run.own) if run.own is not None else None
    own_kind = "error" if own is not None and verdict.about_other_tree(own, judging.merged_tree) else None
    if outcomes.unpack(run.tests).flood:  # whatever else it did: nothing it reported is kept
        return judged("report_flood", run, {"verdict": "report_flood"})
    if verdict.about_other_tree(run, judging.tree):  # the worker vouched for another tree: an error, whatever it said
        return judged("error", run)
    if not (run.passed or run.found_no_tests):
        return judged(run.outcome, run)
    kind, comparison = await compare.hold(ctx, repo, run, judging)
    apart = bool(judging.reset.own or judging.reset.whole)
    first_tests = run.found_no_tests and not comparison.get("passed_before") and apart  # main had none: its own decide
    if kind or not (run.passed or first_tests):  # judged; or an empty run: still pytest's failure (exit 5)
        return judged(kind or run.outcome, run, comparison)
    if not apart:
        return judged("pass", run, comparison)
    said = _own_summary(own, own_kind, judging.reset.own, judging.reset.whole)
    if own is not None and own_kind is None and own.passed:
        return judged("pass", run, comparison, said)
    deciding = own if own is not None else runs.unfinished(repo, judging.merged, say.OWN_TESTS_DID_NOT_RUN)
    return judged(own_kind or deciding.outcome, deciding, comparison, said)


def _own_summary(own: Result | None, kind: str | None, files: tuple[str, ...], whole: bool) -> dict[str, Any]:
    extent = {"whole": True} if whole else {}
    if own is None:
        return {"outcome": "error", "files": list(files), **extent}
    return {"outcome": kind or own.outcome, "files": list(files), "counts": (own.tests or {}).get("counts") or {},
            "failing": list(own.failing_tests), "commit": own.commit_sha, **extent}


async def held_out(ctx: Context, repo: Repo, judging: Judging, judged: Judged, *, candidate_id: int) -> int | None:
    """The held-out run after a judged run that passed (its job id), when the repository has held-out checks."""
    return await heldout.start(ctx, repo, judged, candidate_id=candidate_id,
                               sandbox={"plugins": judging.spec()["plugins"]})


async def finished(ctx: Context, repo: Repo, judging: Judging, run: Result, *,
                   candidate_id: int) -> tuple[Judged, int | None]:
    """Steps 3 and 4 for a judging job that finished: the judgement, and the held-out run it is waiting for (its job
    id; None when none follows, and the judgement is final)."""
    judged = await judge(ctx, repo, judging, run)
    return judged, await held_out(ctx, repo, judging, judged, candidate_id=candidate_id)


async def held_finished(ctx: Context, repo: Repo, judged: Judged, job: Job) -> Judged:
    """The judgement once its held-out job is over (done, cancelled, or given up on: ``runs.result_of``)."""
    return await heldout.combine(ctx, repo, judged, runs.result_of(repo, judged.run.commit_sha, job))


async def run(ctx: Context, repo: Repo, judging: Judging, purpose: str, *, candidate_id: int,
              window_width: int | None = None, again: Result | None = None) -> Judged:
    """The four steps in a row for one judging run, waiting for each job: what the verdict reads (``again``: the
    run a retry repeats, ``start``)."""
    job_id = await start(ctx, repo, judging, purpose, candidate_id=candidate_id, window_width=window_width,
                         again=again)
    job = await ctx.db.jobs.wait_job(job_id, timeout=runs.run_limit(ctx, repo))
    judged, held = await finished(ctx, repo, judging, runs.result_of(repo, judging.sha, job), candidate_id=candidate_id)
    if held is None:
        return judged
    return await held_finished(ctx, repo, judged, await ctx.db.jobs.wait_job(held, timeout=runs.run_limit(ctx, repo)))
