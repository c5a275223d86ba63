"""The git layer on its own: what a push brings is decided by ancestry, and merges are dated when made."""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pygit2
import pytest

from mergebot.git import changes
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


def test_first_reached_finds_shared_commits_whatever_their_dates(tmp_path: Path) -> None:
    """The push check's one walk over every other branch: a commit of this push that another branch in flight
    holds is found, however the dates run; commits of no other branch are not; a long walk says so."""
    rng = random.Random(11)
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    frozen = int(time.time()) - 100_000
    main = _commit(repo, [], "root", frozen)
    mains = [main]
    for i in range(200):  # merges dated before their parents, as in test_new_commits_ignores_dates
        a = _commit(repo, [rng.choice(mains[-10:])], f"a{i}", frozen + 50_000 + i)
        main = _commit(repo, [main, a], f"m{i}", frozen)
        mains.append(main)
    # The skewed dates do make a date-ordered walk that hides main list commits main has (what
    # new_commits avoids): the answer below must not depend on that walk being exact.
    listed = []
    for k in range(100, 200, 5):
        walker = repo.walk(pygit2.Oid(hex=_commit(repo, [mains[k]], f"probe{k}", frozen + 1)))
        walker.hide(pygit2.Oid(hex=main))
        listed.append(len(list(walker)))
    assert max(listed) > 1, listed
    tips = [main, mains[120]]  # branches main already has add nothing
    for i in range(30):  # other subtasks' branches in flight, based on older mains, dated anyhow
        first = _commit(repo, [mains[rng.randrange(150, 200)]], f"o{i}", frozen - rng.randrange(0, 90_000))
        tips.append(_commit(repo, [first], f"p{i}", frozen + rng.randrange(0, 90_000)))
    shared = str(repo[tips[9]].peel(pygit2.Commit).parent_ids[0])  # another branch's first commit, not its tip
    mine = _commit(repo, [shared], "mine", frozen + 99_000)  # this push built on it
    tips.append(_commit(repo, [tips[12], mains[190]], "merged-branch", frozen - 5))  # a branch with a merge
    fresh = _commit(repo, [mains[180]], "fresh", frozen - 99_000)
    assert git.first_reached(repo, tips, [main], {mine, shared}, limit=10_000) == shared
    assert git.first_reached(repo, tips, [main], {tips[31]}, limit=10_000) == tips[31]
    assert git.first_reached(repo, tips, [main], {tips[12]}, limit=10_000) == tips[12]
    assert git.first_reached(repo, tips, [main], {fresh, mine}, limit=10_000) is None
    assert git.first_reached(repo, [], [main], {shared}, limit=10_000) is None
    with pytest.raises(git.WalkTooLong):
        git.first_reached(repo, tips, [main], {fresh}, limit=3)  # over 60 commits to walk
    # exactly what the per-branch answer says, for every commit of every branch
    for tip in tips:
        for c in git.new_commits(repo, tip, [main], limit=100):
            assert git.first_reached(repo, tips, [main], {str(c.id)}, limit=10_000) == str(c.id)


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


def test_push_check_names_the_subtask_whose_branch_holds_a_commit(tmp_path: Path) -> None:
    """``prereceive._foreign``: the one walk finds nothing for fresh work, and a hit is named by subtask, also when
    the walk over every branch is too long to finish and the branches are looked at one by one."""
    from mergebot.landing.intake.prereceive import _foreign

    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    t = int(time.time())
    main = _commit(repo, [], "root", t)
    for i in range(5):
        main = _commit(repo, [main], f"m{i}", t + i)
    a = _commit(repo, [main], "a1", t + 10)
    b1 = _commit(repo, [main], "b1", t + 11)
    b = b1
    for i in range(40):  # a long branch: 41 commits main does not have
        b = _commit(repo, [b], f"b{i + 2}", t + 12 + i)
    others = [(5, a), (7, b)]
    mine = _commit(repo, [b1], "mine", t + 100)  # built on subtask 7's first commit
    assert _foreign(repo, others, main, {mine}, max_commits=100) == []
    assert _foreign(repo, others, main, {mine, b1}, max_commits=100) == [(b1, 7)]
    assert _foreign(repo, others, main, {a}, max_commits=100) == [(a, 5)]
    # limit 10 x 5 = 50 commits: the walk over both branches (42) finishes, and names subtask 7 again
    assert _foreign(repo, others, main, {mine, b1}, max_commits=5) == [(b1, 7)]
    # limit 30: neither the joint walk nor branch 7's finishes; its capped walk (6 commits from the tip) misses
    # b1, as its own push's check would have been cut there too, so nothing is named: what the old check did
    assert _foreign(repo, others, main, {mine, b1}, max_commits=3) == []
    assert _foreign(repo, others, main, {mine, b}, max_commits=3) == [(b, 7)]


def test_a_change_s_patch_id_ignores_where_it_was_committed_but_not_binary_contents(tmp_path: Path) -> None:
    """The same text change committed twice has one patch id; two different binary files do not share one (libgit2
    hashes only a binary file's header), and the same binary file does."""
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)

    def commit(files: dict[str, bytes], parent: str | None, message: str) -> str:
        tree = repo.TreeBuilder(repo[parent].peel(pygit2.Commit).tree) if parent else repo.TreeBuilder()
        for name, data in files.items():
            tree.insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
        sig = pygit2.Signature(message, "a@example.com")
        parents = [pygit2.Oid(hex=parent)] if parent else []
        return str(repo.create_commit(None, sig, sig, message, tree.write(), parents))

    base = commit({"a.txt": b"one\n"}, None, "base")
    text = [commit({"a.txt": b"two\n"}, base, who) for who in ("ann", "bob")]
    images = [commit({"logo.png": data}, base, who) for who, data in
              (("ann", b"\x89PNG\x00\x01"), ("bob", b"\x89PNG\x00\x02"), ("cy", b"\x89PNG\x00\x01"))]
    assert text[0] != text[1] and changes.patch_id(repo, base, text[0]) == changes.patch_id(repo, base, text[1])
    ids = [changes.patch_id(repo, base, sha) for sha in images]
    assert ids[0] != ids[1] and ids[0] == ids[2]
    assert changes.patch_id(repo, base, base) is None  # no change, no id
    # against a repository's target branch, as the sweep for pushes whose post-receive never ran reads it
    repo.references.create("refs/heads/main", base)
    assert changes.patch_id_on(repo.path, "refs/heads/main", text[0]) == changes.patch_id(repo, base, text[0])
    assert changes.patch_id_on(repo.path, "refs/heads/nope", text[0]) is None  # no target branch yet
    assert changes.patch_id_on(repo.path, "refs/heads/main", "0" * 40) is None  # an unknown commit


def test_only_a_stale_ref_lock_is_cleared(tmp_path: Path) -> None:
    lock = tmp_path / "refs" / "heads" / "main.lock"
    assert not git.clear_stale_lock(tmp_path, "refs/heads/main")  # none there
    lock.parent.mkdir(parents=True)
    lock.write_text("x\n")
    assert not git.clear_stale_lock(tmp_path, "refs/heads/main") and lock.exists()  # a live update's
    old = time.time() - 10 * git.STALE_LOCK_SECONDS
    os.utime(lock, (old, old))
    assert git.clear_stale_lock(tmp_path, "refs/heads/main") and not lock.exists()
