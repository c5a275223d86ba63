"""Building a ``Snapshot`` from a running server over the wire, and checking it until the answer is stable.

``gather`` works with any token (a reviewer's is enough): git over HTTP for main and the subtask branches, fetched
into a bare cache repository, and the JSON API, page by page, for the landed rows, the subtasks, the candidates of
the subtasks that matter and the refusals of the subtasks a drill pushed to. A live server moves between those
reads, so ``stable_check`` counts a violation only if every attempt sees it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pygit2

from mergebot import messages as say
from mergebot.client import Client
from mergebot.drill.invariants import Push, Snapshot, Violation, check
from mergebot.drill.wire import _git, basic_header
from mergebot.messages import refs


def _paged(fetch: Callable[[int | None], list[dict[str, Any]]], key: str, limit: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor: int | None = None
    while True:
        page = fetch(cursor)
        out += page
        if len(page) < limit:
            return out
        cursor = page[-1][key]


def gather(client: Client, server: str, token: str, repo_name: str, cache: Path,
           extra_subtasks: Iterable[int] = ()) -> Snapshot:
    """Read everything the check needs from a running server. main is read before the rows, so a landing in
    between shows up as a row whose commit is not on main yet (``stable_check`` retries that away)."""
    repos = {r["name"]: r for r in client.get("/api/v1/repos")["repos"]}
    if repo_name not in repos:
        raise ValueError(say.no_such_repository_on(repo_name, server))
    repo = repos[repo_name]
    branch = repo["target_branch"]
    git_dir = cache / f"{repo_name}.git"
    if not git_dir.exists():
        git_dir.parent.mkdir(parents=True, exist_ok=True)
        _git(["init", "-q", "--bare", str(git_dir)])
    url = f"{server.rstrip('/')}/git/{repo_name}.git"
    _git(["-c", f"http.extraHeader={basic_header(token)}", "--git-dir", str(git_dir), "fetch", "-q", "--prune",
          "--no-tags", url, f"+refs/heads/{branch}:refs/heads/{branch}",
          f"+{refs.GLOB}:{refs.GLOB}"])
    bare = pygit2.Repository(str(git_dir))
    head = str(bare.references[f"refs/heads/{branch}"].target) if f"refs/heads/{branch}" in bare.references \
        else None
    tips = {ref: str(bare.references[ref].target) for ref in bare.references if refs.parse_subtask_ref(ref)}
    landed = _paged(lambda before: client.get("/api/v1/landed", before=before, limit=1000)["landed"], "id", 1000)
    subtasks = _paged(lambda after: client.get("/api/v1/subtasks", after=after or 0, limit=1000)["subtasks"], "id",
                      1000)
    want = {s["id"] for s in subtasks if s["status"] in ("running", "submitted")} | set(extra_subtasks)
    candidates = {sid: client.get("/api/v1/candidates", subtask=sid, limit=1000)["candidates"] for sid in sorted(want)}
    refusals = {sid: [e for e in _paged(lambda after, sid=sid: client.get(  # type: ignore[misc]
        f"/api/v1/subtasks/{sid}/events", after=after or 0, limit=1000)["events"], "id", 1000)
        if e["kind"] == "push_refused"] for sid in sorted(set(extra_subtasks))}
    return Snapshot(repo, git_dir, head, tips, landed, subtasks, candidates, refusals)


def stable_check(client: Client, server: str, token: str, repo_name: str, cache: Path, pushes: Sequence[Push] = (),
                 *, settled: bool = True, attempts: int = 5, pause: float = 1.0) -> list[Violation]:
    """``check`` on a live server: a violation counts only if it is seen on every attempt (a landing caught between
    reading main and reading the rows is not one). Returns the violations of the last attempt that persisted."""
    persistent: set[tuple[str, str]] | None = None
    last: list[Violation] = []
    for i in range(attempts):
        snap = gather(client, server, token, repo_name, cache, {p.subtask_id for p in pushes})
        last = check(snap, pushes, settled=settled)
        keys = {(v.kind, v.subject) for v in last}
        persistent = keys if persistent is None else persistent & keys
        if not persistent:
            return []
        if i + 1 < attempts:
            time.sleep(pause)
    return [v for v in last if (v.kind, v.subject) in (persistent or set())]
