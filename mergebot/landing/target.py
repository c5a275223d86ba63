"""Where main lives: the one place that knows a hosted repository from a forge's.

A ``Target`` is what the queue asks about main and the branches around it. A hosted repository (our own bare
repository, on one disk every replica shares) reads main from its ref and moves it with a compare-and-swap; it has
nothing to publish, gather or tidy. A forge repository follows the forge's branch before it reads (the forge is
the truth: someone may have pushed there directly) and moves it with a push guarded by the expected old value.

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
A commit already on main is on the forge's main: it is never pushed. Nothing else in the queue asks which kind of
repository it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.errors import MergebotError
from mergebot.git import mirror
from mergebot.git import repo as git
from mergebot.landing.context import Context, Published, crash_point
from mergebot.models import Candidate, Repo

log = logging.getLogger(__name__)
GATHER_MAX = 500  # queued candidates looked at per step
SWEEP_SECONDS = 300.0

Fenced = Callable[[Candidate], Awaitable[str | None]]


class Target(Protocol):
    repo: Repo
    path: Path

    async def head(self) -> str:
        """Main as the queue must see it now."""

    async def move(self, old: str, new: str, why: str) -> bool:
        """Move main from ``old`` to ``new``; False when main is not at ``old`` (or the move was refused)."""

    async def moved_branches(self, cands: Sequence[Candidate]) -> list[tuple[Candidate, str]]:
        """The candidates whose branch no longer points at their commit, with the branch's tip."""

    async def branch_tip(self, ref: str) -> str | None:
        """A subtask branch's tip as the queue must see it (None: no such branch)."""

    async def publish(self, sha: str, published: Published | None = None) -> None:
        """Before a verify job names ``sha``: make it reachable to a worker on any machine."""

    async def gather(self, fenced: Fenced) -> None:
        """Before a step: bring in the queued candidates this machine lacks."""

    async def tidy(self, published: Published) -> None:
        """After a step: delete what ``publish`` made that no job needs any more."""

    async def share_notes(self, ref: str) -> None:
        """After the landing statements' git notes changed: put them where a clone of the repository finds them."""


@dataclass
class Hosted:
    """Our own bare repository: main is its ref, moved by compare-and-swap."""

    repo: Repo
    path: Path

    async def head(self) -> str:
        def read() -> str:
            head = git.head_of(git.open_repo(self.path), self.repo.target_ref)
            if head is None:
                raise MergebotError(f"{self.path} has no {self.repo.target_ref}")
            return head

        return await asyncio.to_thread(read)

    async def move(self, old: str, new: str, why: str) -> bool:
        return await asyncio.to_thread(lambda: git.cas(git.open_repo(self.path), self.repo.target_ref, old, new, why))

    async def moved_branches(self, cands: Sequence[Candidate]) -> list[tuple[Candidate, str]]:
        bare = await asyncio.to_thread(git.open_repo, self.path)
        return [(c, tip) for c in cands if (tip := git.head_of(bare, c.ref)) is not None and tip != c.sha]

    async def branch_tip(self, ref: str) -> str | None:
        return await asyncio.to_thread(lambda: git.head_of(git.open_repo(self.path), ref))

    async def publish(self, sha: str, published: Published | None = None) -> None:
        return None  # every replica and worker reads this one repository

    async def gather(self, fenced: Fenced) -> None:
        return None  # every push arrives here

    async def tidy(self, published: Published) -> None:
        return None  # nothing was published

    async def share_notes(self, ref: str) -> None:
        return None  # clones fetch them from this repository


@dataclass
class Forge:
    """A forge's repository, mirrored here: the forge's branch is the truth, moved by a guarded push."""

    repo: Repo
    path: Path
    db: Database

    def _remote(self) -> mirror.Remote:
        return mirror.remote_of(self.repo)

    async def head(self) -> str:
        return await asyncio.to_thread(mirror.sync_target, self.path, self._remote(), self.repo.target_branch)

    async def move(self, old: str, new: str, why: str) -> bool:
        """Once the forge took the push, the landing stands whatever the forge's branch does next. When the push's
        outcome is unknown (the connection broke), the forge is asked; if it cannot say, the error propagates, the
        intent stays pending, and the reconciler decides from the forge's branch once it answers. A push the forge
        refuses for good (branch protection) pauses the repository for an operator."""
        repo, remote = self.repo, self._remote()
        try:
            pushed = await asyncio.to_thread(mirror.push_lease, self.path, remote, repo.target_branch, old, new)
        except mirror.ForgeRefused as e:
            await self.db.repos.set_paused(repo=repo.name, paused=True, reason=e.message)
            await self.db.subtasks.announce(author_id=None, body=say.forge_refused(repo.name, e.message,
                                                                                  repo.target_branch))
            return False
        except mirror.ForgeUnavailable as e:
            log.warning("push to the forge for %s ended unclear (%s); asking the forge", repo.name, e)
            head = await self.head()
            pushed = head == new or await asyncio.to_thread(
                lambda: git.is_ancestor(git.open_repo(self.path), new, head))
        if not pushed:
            return False
        crash_point("after_forge_push")
        with contextlib.suppress(MergebotError):  # the mirror follows on the next pass if not now
            await self.head()
        return True

    async def moved_branches(self, cands: Sequence[Candidate]) -> list[tuple[Candidate, str]]:
        return []  # the forge's branches are the forge's; the mirror follows them lazily

    async def branch_tip(self, ref: str) -> str | None:
        """The forge's tip (fetched into this mirror), whichever replica asks."""
        def read() -> str | None:
            remote = self._remote()
            mirror.ensure_mirror(self.path, remote, self.repo.target_branch)
            tip = mirror.forge_tip(self.path, remote, ref)
            if tip is None:
                return None
            mirror.have_commit(self.path, remote, self.repo.target_branch, tip, ref)
            mirror.set_branch(self.path, ref, tip, "mergebot: the forge's tip, read again")
            return tip

        return await asyncio.to_thread(read)

    async def publish(self, sha: str, published: Published | None = None) -> None:
        """Push ``sha`` to its queue branch, unless the forge's main already has it."""
        def push() -> bool:
            remote = self._remote()
            mirror.ensure_mirror(self.path, remote, self.repo.target_branch)
            bare = git.open_repo(self.path)
            main = git.head_of(bare, self.repo.target_ref)
            if main is not None and git.is_ancestor(bare, sha, main):
                return False
            mirror.publish(self.path, remote, self.repo.target_branch, sha)
            return True

        if await asyncio.to_thread(push) and published is not None:
            published.shas.setdefault(self.repo.name, set()).add(sha)

    async def gather(self, fenced: Fenced) -> None:
        """Fetch the queued candidates this mirror lacks (another replica received their webhooks) from their
        subtask branches on the forge. One the forge no longer has is superseded when its subtask moved on
        (``fenced`` says why); otherwise the forge is in trouble, and the error holds this repository's queue until
        it answers."""
        repo, path, db = self.repo, self.path, self.db
        cands = await db.landing.waiting_candidates(repo.name, [], GATHER_MAX)
        if not cands:
            return
        remote = self._remote()
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
            await asyncio.to_thread(mirror.set_branch, path, cand.ref, cand.sha,
                                    f"mergebot: fetched candidate {cand.id}")
            log.info("fetched candidate %s (%s) of %s from the forge", cand.id, cand.sha[:12], repo.name)

    async def tidy(self, published: Published) -> None:
        """Delete the queue branches whose jobs have all ended: this process's at once, and every
        ``SWEEP_SECONDS`` any the forge holds (a dead replica's, an acceptance probe another replica pushed)."""
        repo, path = self.repo, self.path
        mine = published.shas.get(repo.name, set())
        now = time.monotonic()
        sweep = now - published.swept.get(repo.name, float("-inf")) >= SWEEP_SECONDS
        remote = self._remote()
        seen = set(mine)
        if sweep:
            published.swept[repo.name] = now
            try:
                seen |= set(await asyncio.to_thread(mirror.published, path, remote, repo.target_branch))
            except mirror.ForgeUnavailable as e:  # the queue goes on; the next sweep looks again
                log.info("cannot list the queue branches of %s: %s", repo.name, e)
        if not seen:
            return
        jobs = await self.db.jobs.open_on(repo=repo.name, shas=sorted(seen))  # sha -> any job queued or running
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

    async def share_notes(self, ref: str) -> None:
        """The forge holds the notes too: a clone of the forge's repository fetches them from there."""
        await asyncio.to_thread(mirror.push_notes, self.path, self._remote(), ref)


def open_target(repo: Repo, path: Path, db: Database) -> Target:
    """The target of ``repo`` whose bare repository (or mirror) is at ``path``."""
    return Forge(repo, path, db) if repo.forge else Hosted(repo, path)


def target_for(ctx: Context, repo: Repo) -> Target:
    return open_target(repo, ctx.path(repo), ctx.db)
