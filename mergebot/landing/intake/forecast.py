"""The conflict forecast: before the queue says no, who else touches the files a change touches.

For a change (a pushed commit, or only the paths an agent's worktree changes): the live candidates of other
subtasks that change the same files (their paths are recorded when they are queued), the running subtasks whose
footprints cover them, and — when the commit is here — whether it already conflicts with main or with one of
those candidates. Every merge is in memory and writes no commit (milliseconds each); at most 20 candidates
(``candidates_touching``) are tried. The sentences are ``messages.forecast``'s.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from mergebot.db.database import Database
from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.git.union import Union
from mergebot.landing.main.land import union_of
from mergebot.models import Repo


@dataclass
class Forecast:
    paths: list[str]  # what the change touches
    conflicts_with_main: list[str] | None = None  # the conflicting paths; None when unknown (no commit to merge)
    candidates: list[dict[str, Any]] = field(default_factory=list)  # live candidates touching the same files
    running: list[dict[str, Any]] = field(default_factory=list)  # running subtasks whose footprints cover them

    @property
    def quiet(self) -> bool:
        return not (self.conflicts_with_main or self.candidates or self.running)


def _merges(path: Path, main: str, sha: str, others: list[str],
            union: Union) -> tuple[list[str], list[bool]]:
    """The change's conflicts with main, and whether it conflicts with each of ``others`` (blocking); a conflict
    the queue would merge by union (``union``) is none."""
    bare = git.open_repo(path)
    try:
        on_main = git.merge_onto(bare, main, sha, "", commit=False, union=union)
    except (pygit2.GitError, KeyError, ValueError):
        on_main = git.Merge("unknown")
    with_others = []
    for other in others:
        try:
            with_others.append(git.merge_onto(bare, other, sha, "", commit=False, union=union).kind == "conflict")
        except (pygit2.GitError, KeyError, ValueError):
            with_others.append(False)
    return (on_main.conflicts if on_main.kind == "conflict" else []), with_others


def _own_paths(path: Path, target_ref: str, sha: str, known: list[str] | None) -> tuple[str, list[str]] | None:
    """Main's head and what ``sha`` changes on its own (``known``: already read, e.g. recorded when queued)."""
    bare = git.open_repo(path)
    main = git.head_of(bare, target_ref)
    if main is None:
        return None
    return main, known if known is not None else changes.own_paths(bare, main, sha)


async def forecast(db: Database, path: Path, repo: Repo, subtask_id: int, *, sha: str | None = None,
                   paths: list[str] | None = None, known: bool = False) -> Forecast:
    """The forecast for ``sha`` (when this repository has it) or else for ``paths``; ``known``: ``paths`` are
    ``sha``'s own, already read (a queued candidate's), so they are not read again."""
    main = None
    mine = list(paths or [])
    if sha is not None:
        try:
            got = await asyncio.to_thread(_own_paths, path, repo.target_ref, sha, mine if known else None)
        except (pygit2.GitError, KeyError, ValueError):  # not pushed (yet): the paths alone
            got = None
        if got is not None:
            main, mine = got
    out = Forecast(paths=mine)
    if not mine:
        return out
    out.candidates = [dict(r) for r in await db.landing.touching(repo=repo.name, subtask_id=subtask_id, paths=mine)]
    out.running = [{"subtask_id": r["id"], "title": r["title"], "owner": r["owner"], "footprint": r["paths"]}
                   for r in await db.subtasks.overlapping(subtask_id, mine) if r["status"] == "running"]
    if main is not None and sha is not None:
        conflicts, with_others = await asyncio.to_thread(_merges, path, main, sha, [c["sha"] for c in out.candidates],
                                                         union_of(repo))
        out.conflicts_with_main = conflicts
        for c, conflict in zip(out.candidates, with_others, strict=True):
            c["conflicts"] = conflict
    return out
