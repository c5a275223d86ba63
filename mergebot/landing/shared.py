"""The queue's commits on the forge, for replicas and workers that share no disk with the one that made them.

A forge repository needs no shared disk: each ``serve`` replica keeps its own mirror (``git.mirror``). Three
things cross between machines, and each goes through the forge:
  * a candidate another replica received: the leader fetches the queued candidates it lacks from their subtask
    branches before each step (``gather``);
  * a commit made here that a verify job names (a merge, a probe): pushed to its queue branch,
    ``mergebot-queue/<target>/<sha>``, before the job exists (``publish``), so any worker can fetch it;
  * a queue branch whose verdicts are all in: deleted after its last job ends (``tidy``), and every
    ``SWEEP_SECONDS`` (and on taking the leadership) the forge's queue branches are swept for ones a dead replica
    left. A branch with no job at all is deleted only when two sweeps in a row find it so (it may be between its
    push and its job).

A commit already on main is on the forge's main: it is never pushed. A hosted repository lives on one disk, which
every replica must share; nothing here applies to it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from mergebot.db.database import Database
from mergebot.git import mirror
from mergebot.git import repo as git
from mergebot.models import Candidate, Repo

log = logging.getLogger(__name__)
GATHER_MAX = 500  # queued candidates looked at per step
SWEEP_SECONDS = 300.0


@dataclass
class Published:
    """What this process pushed to queue branches and has not deleted yet, and what its sweeps found, by repository."""

    shas: dict[str, set[str]] = field(default_factory=dict)
    jobless: dict[str, set[str]] = field(default_factory=dict)  # seen on the forge with no job by the last sweep
    swept: dict[str, float] = field(default_factory=dict)  # when each repository's queue branches were last swept


async def publish(path: Path, repo: Repo, sha: str, published: Published | None = None) -> None:
    """Before a verify job names ``sha``: push it to its queue branch, unless the forge's main already has it."""
    if not repo.forge:
        return

    def push() -> bool:
        remote = mirror.remote_of(repo)
        mirror.ensure_mirror(path, remote, repo.target_branch)
        bare = git.open_repo(path)
        main = git.head_of(bare, repo.target_ref)
        if main is not None and git.is_ancestor(bare, sha, main):
            return False
        mirror.publish(path, remote, repo.target_branch, sha)
        return True

    if await asyncio.to_thread(push) and published is not None:
        published.shas.setdefault(repo.name, set()).add(sha)


async def gather(db: Database, path: Path, repo: Repo, fenced: Callable[[Candidate], Awaitable[str | None]]) -> None:
    """Fetch the queued candidates this mirror lacks (another replica received their webhooks) from their subtask
    branches on the forge. One the forge no longer has is superseded when its subtask moved on (``fenced`` says
    why); otherwise the forge is in trouble, and the error holds this repository's queue until it answers."""
    if not repo.forge:
        return
    cands = await db.landing.waiting_candidates(repo.name, [], GATHER_MAX)
    if not cands:
        return
    remote = mirror.remote_of(repo)
    await asyncio.to_thread(mirror.ensure_mirror, path, remote, repo.target_branch)
    lacking = set(await asyncio.to_thread(mirror.missing, path, [c.sha for c in cands]))
    for cand in (c for c in cands if c.sha in lacking):
        try:
            await asyncio.to_thread(mirror.have_commit, path, remote, repo.target_branch, cand.sha, cand.ref)
        except mirror.ForgeUnavailable:
            why = await fenced(cand)
            if why is None:
                raise
            await db.landing.finish_candidate(cand.id, "superseded", why)
            continue
        await asyncio.to_thread(mirror.set_branch, path, cand.ref, cand.sha, f"mergebot: fetched candidate {cand.id}")
        log.info("fetched candidate %s (%s) of %s from the forge", cand.id, cand.sha[:12], repo.name)


async def branch_tip(path: Path, repo: Repo, ref: str) -> str | None:
    """A subtask branch's tip as the queue must see it: the forge's (fetched into this mirror) for a forge
    repository, whichever replica asks; the bare repository's for a hosted one."""
    def read() -> str | None:
        if repo.forge:
            remote = mirror.remote_of(repo)
            mirror.ensure_mirror(path, remote, repo.target_branch)
            tip = mirror.forge_tip(path, remote, ref)
            if tip is None:
                return None
            mirror.have_commit(path, remote, repo.target_branch, tip, ref)
            mirror.set_branch(path, ref, tip, "mergebot: the forge's tip, read again")
            return tip
        return git.head_of(git.open_repo(path), ref)

    return await asyncio.to_thread(read)


async def tidy(db: Database, path: Path, repo: Repo, published: Published) -> None:
    """Delete the queue branches whose jobs have all ended: this process's at once, and every ``SWEEP_SECONDS`` any
    the forge holds (a dead replica's, an acceptance probe another replica pushed)."""
    if not repo.forge:
        return
    mine = published.shas.get(repo.name, set())
    now = time.monotonic()
    sweep = now - published.swept.get(repo.name, float("-inf")) >= SWEEP_SECONDS
    remote = mirror.remote_of(repo)
    seen = set(mine)
    if sweep:
        published.swept[repo.name] = now
        try:
            seen |= set(await asyncio.to_thread(mirror.published, path, remote, repo.target_branch))
        except mirror.ForgeUnavailable as e:  # the queue goes on; the next sweep looks again
            log.info("cannot list the queue branches of %s: %s", repo.name, e)
    if not seen:
        return
    jobs = await db.jobs.open_on(repo=repo.name, shas=sorted(seen))  # sha -> any job still queued or running
    ended = {s for s in seen if s in jobs and not jobs[s]}
    if sweep:
        jobless = {s for s in seen - mine if s not in jobs}
        ended |= jobless & published.jobless.get(repo.name, set())
        published.jobless[repo.name] = jobless - ended
    if not ended:
        return
    try:
        await asyncio.to_thread(mirror.unpublish, path, remote, repo.target_branch, sorted(ended))
    except mirror.ForgeUnavailable as e:  # one already gone fails the push too; the next sweep finds the rest
        log.info("queue branches of %s not all deleted: %s", repo.name, e)
    mine -= ended


def forget(published: Published, repo: str) -> None:
    """A new leadership sweeps at once: what the last leader left is found on the forge."""
    published.swept.pop(repo, None)
