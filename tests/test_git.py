"""The git layer on its own: what a push brings is decided by ancestry, and merges are dated when made."""
from __future__ import annotations

import random
import time
from pathlib import Path

import pygit2

from mergebot.git import repo as git


def _commit(repo: pygit2.Repository, parents: list[str], name: str, when: int, ref: str | None = None) -> str:
    blob = repo.create_blob(name.encode())
    tb = repo.TreeBuilder(repo[parents[0]].peel(pygit2.Commit).tree) if parents else repo.TreeBuilder()
    tb.insert(name, blob, pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("t", "t@example.com", when, 0)
    oid = repo.create_commit(ref, sig, sig, name, tb.write(), [pygit2.Oid(hex=p) for p in parents])
    return str(oid)


def test_new_commits_ignores_dates(tmp_path: Path) -> None:
    """Merges dated long before their parents (as the bot once wrote them) are still known to be on main.

    A date-ordered revision walk with ``hide(main)`` listed such commits as new (17 of these 300 pushes),
    and the push check then blamed them on another subtask."""
    rng = random.Random(7)
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    frozen = int(time.time()) - 100_000  # the old module-level signature's date, on every landing merge
    now = frozen + 50_000
    main = _commit(repo, [], "root", frozen)
    mains = [main]
    for i in range(300):
        a = _commit(repo, [rng.choice(mains[-10:])], f"a{i}", now + 2 * i)
        b = _commit(repo, [a], f"b{i}", now + 2 * i + 1)
        assert [str(c.id) for c in git.new_commits(repo, b, [main], limit=100)] == [b, a], i
        main = _commit(repo, [main, b], f"m{i}", frozen)
        mains.append(main)
    assert git.new_commits(repo, main, [main], limit=100) == []
    assert git.new_commits(repo, mains[100], [main], limit=100) == []
    older = _commit(repo, [mains[20]], "agent-c", frozen - 40_000)  # agents date their work anyhow
    assert [str(c.id) for c in git.new_commits(repo, older, [main], limit=100)] == [older]
    # the limit still cuts the walk at limit + 1
    assert len(git.new_commits(repo, main, [mains[0]], limit=5)) == 6


def test_merge_onto_dates_the_merge_now(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    old = int(time.time()) - 86_400
    root = _commit(repo, [], "root", old)
    base = _commit(repo, [root], "base", old + 1)
    cand = _commit(repo, [root], "cand", old + 2)
    before = int(time.time())
    first = git.merge_onto(repo, base, cand, "land 1")
    time.sleep(1.1)
    second = git.merge_onto(repo, base, cand, "land 2")
    assert first.kind == second.kind == "merge"
    assert first.sha and second.sha
    t1 = repo[first.sha].peel(pygit2.Commit).committer.time
    t2 = repo[second.sha].peel(pygit2.Commit).committer.time
    assert before <= t1 < t2
