"""The diff summary of a landing (files changed, lines added and removed), read from the bot's repository.

A landed row names its base and merged commits; what changed between them never changes, so summaries are
computed once (pygit2, off the event loop) and kept in a bounded LRU cache. A repository or commit that is not
there (a mirror behind, a record landed without git) gives None, is not cached, and the page shows a dash.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import pygit2

from mergebot.git import repo as git

CACHE_SIZE = 4096


@dataclass(frozen=True)
class DiffSummary:
    files: int
    insertions: int
    deletions: int


Key = tuple[str, str, str]  # (repo, base sha, merged sha)

_cache: OrderedDict[Key, DiffSummary] = OrderedDict()
_lock = threading.Lock()


def _compute(path: Path, base: str, merged: str) -> DiffSummary | None:
    try:
        repo = git.open_repo(path)
        old = repo[base].peel(pygit2.Commit).tree
        new = repo[merged].peel(pygit2.Commit).tree
        stats = old.diff_to_tree(new).stats
    except (KeyError, ValueError, pygit2.GitError):
        return None
    return DiffSummary(stats.files_changed, stats.insertions, stats.deletions)


def summaries(root: Path, keys: list[Key]) -> dict[Key, DiffSummary | None]:
    """Summaries for many landings at once (one thread hop per page). Blocking: call it in a thread."""
    out: dict[Key, DiffSummary | None] = {}
    for key in keys:
        with _lock:
            if key in _cache:
                _cache.move_to_end(key)
                out[key] = _cache[key]
                continue
        repo, base, merged = key
        value = _compute(git.bare_path(root, repo), base, merged)
        if value is not None:  # a miss may be temporary (a mirror catching up): ask again next time
            with _lock:
                _cache[key] = value
                while len(_cache) > CACHE_SIZE:
                    _cache.popitem(last=False)
        out[key] = value
    return out
