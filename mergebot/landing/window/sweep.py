"""Queued candidates tried on main while the window's runs are busy (``sweep``): one that conflicts with main, or is
on it already, is rejected now rather than when its turn comes, many landings later.

Each is tried once per main it could conflict with: the window remembers the ones that apply (``Window.tried``,
with the paths each changes) and, when main moves, tries again only those whose paths main's change touches. At
most ``SWEEP`` merges a step, all in memory, for about ``SWEEP_SECONDS``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pygit2

from mergebot.db.database import Database
from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.git.union import Union
from mergebot.landing.main import land as landing
from mergebot.landing.target import Target
from mergebot.landing.window.chain import Window
from mergebot.models import Repo

SWEEP = 32  # queued candidates tried on main per queue step, at most
SWEEP_SECONDS = 0.25  # and for about this long: the step goes back to its runs' results after it
TRIED_MAX = 10_000  # candidates remembered as applying on main; past it the memory starts again


def _probe(path: Path, main: str, sha: str, union: Union) -> tuple[git.Merge, frozenset[str]]:
    """Whether ``sha`` applies on ``main`` (no commit written), and the paths it changes on its own."""
    bare = git.open_repo(path)
    probe = git.merge_onto(bare, main, sha, "", commit=False, union=union)
    applies = probe.applies
    return probe, frozenset(changes.own_paths(bare, main, sha)) if applies else frozenset()


async def sweep(db: Database, repo: Repo, window: Window, target: Target, main: str) -> None:
    """Try queued candidates on main while the runs are busy; reject the ones that conflict with it (or are
    already on it) now, rather than when their turn comes, many landings later. Each is tried once per main
    it could conflict with: when main moves, only the ones whose own paths main's change touches are tried
    again. At most ``SWEEP`` merges a step, all in memory, for about ``SWEEP_SECONDS``."""
    path = target.path
    if window.tried_on != main:
        old, window.tried_on = window.tried_on, main
        if old is None or len(window.tried) > TRIED_MAX:
            window.tried = {}
        else:
            try:
                moved = frozenset(await asyncio.to_thread(
                    lambda: changes.commit_paths(git.open_repo(path), old, main)))
            except (pygit2.GitError, KeyError, ValueError):
                moved = None
            window.tried = {} if moved is None else {
                cid: paths for cid, paths in window.tried.items() if not paths & moved}
    loop = asyncio.get_running_loop()
    until = loop.time() + SWEEP_SECONDS
    for cand in await db.landing.waiting_candidates(repo.name, sorted(window.tried), SWEEP):
        if loop.time() > until:
            break
        try:
            probe, paths = await asyncio.to_thread(_probe, path, main, cand.sha, landing.union_of(repo))
        except (pygit2.GitError, KeyError, ValueError):  # not here (yet): its turn will tell
            window.tried[cand.id] = frozenset()
            continue
        if probe.kind not in ("conflict", "up-to-date"):
            window.tried[cand.id] = paths
            continue
        taken = await db.landing.take_candidate(cand.id)
        if taken is None:  # taken or replaced meanwhile
            continue
        why = await landing.fenced(db, taken)
        if why is not None:
            await db.landing.finish_candidate(taken.id, "superseded", why)
            continue
        await landing.reject_unmergeable(db, target, repo, taken, probe, main)
