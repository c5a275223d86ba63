"""Git in memory, with pygit2: the operations the landing path needs and nothing else.

Rules:
  * Merges happen in memory (``merge_commits`` -> ``write_tree`` -> ``create_commit`` with no ref update);
    no working tree is touched.
  * Refs move only by compare-and-swap: ``Reference.set_target`` on a looked-up reference fails when the
    reference changed since it was read (libgit2 checks the old value). ``force=True`` creation is never used
    on a ref someone else may move.
  * Nothing here ever runs a shell: paths, refs and messages are arguments, never command text.
  * A conflict is resolved by the bot only by union, only in the files main says so of (``mergebot.git.union``,
    issue 45). Git's own attribute lookup is kept out of the merge (``attr.tree`` is the empty tree): the bot alone
    decides, and names every file it merged so (``Merge.union``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import pygit2

from mergebot import messages as say
from mergebot.git import union as union_

# The top-level hooks/ folder, shipped inside the package (mergebot/git/hooks links to it; pyproject's package data
# puts its files in the wheel): found through the package, so an installed copy has them as an editable one does.
HOOKS = resources.files("mergebot.git") / "hooks"
HOOK_NAMES = ("pre-receive", "post-receive")
APPLIES = ("merge", "fast-forward", "squash")  # the kinds of ``Merge`` that bring something to land
# Where git merge-tree reads attributes from (git >= 2.42 reads a bare repository's HEAD by default): the empty tree,
# so no attribute of any tree picks a merge driver behind the bot's back (a value that does not resolve, as this
# one in a SHA-256 repository, counts as the empty tree too; older git ignores the setting and reads none).
NO_ATTRIBUTES = "attr.tree=4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def bot_signature() -> pygit2.Signature:
    """Mergebot's signature, dated now: a module-level one would date every merge at server start."""
    return pygit2.Signature("Mergebot", "mergebot@localhost")


def bare_path(root: Path, name: str) -> Path:
    """Where the bot keeps repository ``name`` (validated by the caller) under ``root``."""
    return root / f"{name}.git"


@dataclass
class Merge:
    kind: str  # "fast-forward", "merge", "squash", "up-to-date" or "conflict"
    sha: str | None = None
    tree: str | None = None
    conflicts: list[str] = field(default_factory=list)
    candidate: str | None = None  # the commit merged in (its parent in a merge; never an ancestor of a squash)
    union: list[str] = field(default_factory=list)  # the files whose conflict was merged by union (``git.union``)

    @property
    def applies(self) -> bool:
        """Whether there is a commit to verify and land (not a conflict, not already there)."""
        return self.kind in APPLIES


def run_git(args: list[str], cwd: Path | None = None, timeout: float = 300.0,
            extra_env: dict[str, str] | None = None) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, env={**_git_env(), **(extra_env or {})}, capture_output=True,
                         text=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(say.git_failed(args[:2], out.stderr))
    return out.stdout


def create_bare(path: Path, *, source: str | None, branch: str, extra_env: dict[str, str] | None = None,
                only_branch: bool = False) -> pygit2.Repository:
    """A bare repository at ``path``: imported from ``source`` (a path or URL) or new with one empty commit.

    ``only_branch``: import that branch alone (a forge mirror takes nothing it was not told about by a webhook).
    """
    if path.exists():
        raise FileExistsError(say.already_exists(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    if source:
        only = ["--single-branch", "--no-tags", "--branch", branch] if only_branch else []
        run_git(["clone", "--bare", "--quiet", *only, "--", source, str(path)], extra_env=extra_env)
        repo = pygit2.Repository(str(path))
        if f"refs/heads/{branch}" not in repo.references:
            shutil.rmtree(path)
            raise ValueError(say.no_branch(source, branch))
    else:
        repo = pygit2.init_repository(str(path), bare=True, initial_head=branch)
        tree = repo.TreeBuilder().write()
        bot = bot_signature()
        repo.create_commit(f"refs/heads/{branch}", bot, bot, "Mergebot: initial commit", tree, [])
    configure(path)
    return repo


def configure(path: Path) -> None:
    """Settings every managed repository gets: an audit trail of ref moves, and our hooks."""
    repo = pygit2.Repository(str(path))
    repo.config["core.logAllRefUpdates"] = "always"
    repo.config["receive.denyNonFastForwards"] = "false"
    repo.config["receive.fsckObjects"] = "true"
    repo.config["uploadpack.allowAnySHA1InWant"] = "true"
    install_hooks(path)


def install_hooks(path: Path) -> None:
    """Copy the thin hooks in (a shell script and curl: a Python start would cost more than the check)."""
    if shutil.which("curl") is None:
        raise RuntimeError(say.HOOKS_NEED_CURL)
    hooks = path / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in HOOK_NAMES:
        dst = hooks / name
        dst.write_bytes((HOOKS / name).read_bytes())
        dst.chmod(0o755)  # executable whatever mode the wheel, the installer or the checkout kept


def open_repo(path: Path, quarantine: str | None = None) -> pygit2.Repository:
    repo = pygit2.Repository(str(path))
    if quarantine:
        repo.odb.add_disk_alternate(quarantine)
    return repo


def head_of(repo: pygit2.Repository, ref: str) -> str | None:
    try:
        return str(repo.references[ref].target)
    except KeyError:
        return None


def merge_onto(repo: pygit2.Repository, base: str, candidate: str, message: str, *, commit: bool = True,
               union: union_.Union | None = None) -> Merge:
    """What ``candidate`` becomes on top of ``base``, computed in memory. Nothing is written to any ref.
    ``commit=False``: only whether it applies (a probe: a clean merge has its tree and no commit). ``union``:
    the files whose conflict is merged by union (``mergebot.git.union``); a merge that conflicts in those alone
    applies, and names them (``Merge.union``); one that conflicts elsewhere too is a conflict in the others.

    The merged tree comes from ``git merge-tree --write-tree``, which touches only the changed paths (about
    8 ms at any repository size, against 30-130 ms for pygit2's ``write_tree`` on 5,000 files); the commit is
    written with pygit2. Without git >= 2.38 it falls back to pygit2's in-memory merge.
    """
    if base == candidate or repo.descendant_of(base, candidate):
        return Merge("up-to-date", base, str(repo[base].peel(pygit2.Commit).tree_id))
    cand = repo[candidate].peel(pygit2.Commit)
    if repo.descendant_of(candidate, base):
        return Merge("fast-forward", candidate, str(cand.tree_id), candidate=candidate)
    out = subprocess.run(["git", "-c", NO_ATTRIBUTES, "--git-dir", repo.path, "merge-tree", "--write-tree", "-z",
                          "--no-messages", base, candidate], capture_output=True, text=True, check=False,
                         env=_git_env())
    merged: list[str] = []
    if out.returncode in (0, 1) and out.stdout:
        fields = out.stdout.split("\0")
        tree = pygit2.Oid(hex=fields[0].strip())
        if out.returncode == 1:
            stages: dict[str, union_.Stages] = union_.stages_of(fields[1:])
            blobs, left = union_.resolve(repo, stages, union)
            if left or not stages:  # (a conflict git names no file of would still be one)
                return Merge("conflict", conflicts=left)
            tree = union_.tree_with(repo, tree, blobs)
            merged = sorted(blobs)
    else:
        index = repo.merge_commits(base, candidate)
        if index.conflicts is not None:
            stages = {}
            for entries in index.conflicts:
                for n, e in enumerate(entries, 1):
                    if e is not None:
                        stages.setdefault(e.path, {})[n] = (int(e.mode), str(e.id))
            blobs, left = union_.resolve(repo, stages, union)
            if left:
                return Merge("conflict", conflicts=left)
            for path, (mode, blob) in blobs.items():
                del index.conflicts[path]
                index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=blob), pygit2.enums.FileMode(mode)))
            merged = sorted(blobs)
        tree = index.write_tree(repo)
    if not commit:
        return Merge("merge", None, str(tree), candidate=candidate, union=merged)
    bot = bot_signature()
    sha = repo.create_commit(None, bot, bot, message, tree, [pygit2.Oid(hex=base), cand.id])
    return Merge("merge", str(sha), str(tree), candidate=candidate, union=merged)


def tree_with_files(repo: pygit2.Repository, tree: str, files: Sequence[tuple[str, bytes]]) -> pygit2.Oid:
    """``tree`` with ``files`` written at their paths (regular files), as a new tree in ``repo``."""
    index = pygit2.Index()
    index.read_tree(repo[tree].peel(pygit2.Tree))
    for path, data in files:
        index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    return index.write_tree(repo)


def commit_with_files(repo: pygit2.Repository, base: str, files: Sequence[tuple[str, bytes]], message: str) -> str:
    """A commit on ``base`` (written, on no ref) whose tree is ``base``'s with ``files`` written into it."""
    tree = tree_with_files(repo, str(repo[base].peel(pygit2.Commit).tree_id), files)
    bot = bot_signature()
    return str(repo.create_commit(None, bot, bot, message, tree, [pygit2.Oid(hex=base)]))


def commit_with_paths_of(repo: pygit2.Repository, base: str, source: str, take: Sequence[str],
                         drop: Sequence[str], message: str) -> tuple[str, str]:
    """A commit on ``base`` (written, on no ref) whose tree is ``base``'s with each path of ``take`` as in commit
    ``source`` (same blob and mode) and each path of ``drop`` removed: (commit, tree). Dated like ``base``, so the
    same request gives the same commit."""
    head = repo[base].peel(pygit2.Commit)
    other = repo[source].peel(pygit2.Commit).tree
    index = pygit2.Index()
    index.read_tree(head.tree)
    for path in take:
        entry = other[path]
        index.add(pygit2.IndexEntry(path, entry.id, entry.filemode))
    for path in drop:
        if path in index:
            index.remove(path)
    tree = index.write_tree(repo)
    when = head.committer
    bot = pygit2.Signature("Mergebot", "mergebot@localhost", when.time, when.offset)
    return str(repo.create_commit(None, bot, bot, message, tree, [head.id])), str(tree)


def with_files(repo: pygit2.Repository, base: str, merge: Merge, files: Sequence[tuple[str, bytes]],
               message: str) -> Merge:
    """``merge`` (a merge, fast-forward or squash onto ``base``) with ``files`` written at their paths over whatever
    it has there: a commit of its own with ``base`` and the candidate as parents (a fast-forward becomes a merge;
    a squash stays one commit on ``base``). The same merge when its tree already holds exactly those files."""
    assert merge.sha is not None and merge.tree is not None and merge.candidate is not None
    new_tree = tree_with_files(repo, merge.tree, files)
    if str(new_tree) == merge.tree:
        return merge
    bot = bot_signature()
    if merge.kind == "squash":
        parents, kind = [pygit2.Oid(hex=base)], "squash"
    else:
        parents, kind = [pygit2.Oid(hex=base), pygit2.Oid(hex=merge.candidate)], "merge"
    sha = repo.create_commit(None, bot, bot, message, new_tree, parents)
    return Merge(kind, str(sha), str(new_tree), candidate=merge.candidate, union=merge.union)


def squash(repo: pygit2.Repository, base: str, merge: Merge, message: str) -> Merge:
    """``merge`` (a merge or fast-forward onto ``base``) as one commit whose only parent is ``base``, with exactly
    its tree and ``message``; authored as the candidate's commit was, committed by the bot. A fast-forward of one
    commit on ``base`` that already says ``message`` (the bot's own revert) is kept as it is."""
    assert merge.sha is not None and merge.tree is not None and merge.candidate is not None
    tip = repo[merge.candidate].peel(pygit2.Commit)
    if merge.kind == "fast-forward" and [str(p) for p in tip.parent_ids] == [base] and tip.message == message:
        return merge
    bot = bot_signature()
    sha = repo.create_commit(None, tip.author, bot, message, pygit2.Oid(hex=merge.tree), [pygit2.Oid(hex=base)])
    return Merge("squash", str(sha), merge.tree, candidate=merge.candidate, union=merge.union)


def revert_onto(repo: pygit2.Repository, head: str, base: str, landed: str, message: str, ref: str) -> str | None:
    """The bot's revert of the change ``base``..``landed`` (one landing, fast-forward or merge) as a new commit on
    ``head``, pointed at by ``ref``; None when it no longer applies cleanly (later changes touched the same lines).
    A three-way merge of ``head`` and ``base`` over ``landed`` undoes exactly that change and keeps the rest."""
    tree_of = {sha: repo[sha].peel(pygit2.Commit).tree for sha in (head, base, landed)}
    index = repo.merge_trees(tree_of[landed], tree_of[head], tree_of[base])
    if index.conflicts is not None:
        return None
    bot = bot_signature()
    sha = str(repo.create_commit(None, bot, bot, message, index.write_tree(repo), [pygit2.Oid(hex=head)]))
    repo.references.create(ref, sha, force=True)
    return sha


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MERGEBOT_", "GIT_DIR", "GIT_WORK_TREE"))}
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    return env


def cas(repo: pygit2.Repository, ref: str, old: str, new: str, message: str, attempts: int = 20) -> bool:
    """Move ``ref`` from ``old`` to ``new`` only if it still points at ``old``. False if it moved."""
    for _ in range(attempts):
        reference = repo.references[ref]
        if str(reference.target) != old:
            return False
        try:
            reference.set_target(pygit2.Oid(hex=new), message)
            return True
        except pygit2.GitError as e:
            if "does not match" in str(e):
                return False
            time.sleep(0.005)  # libgit2 fails at once on a held lock file: retry
    return False


STALE_LOCK_SECONDS = 2.0  # a ref update holds its lock for milliseconds: one this old was left by a killed process


def clear_stale_lock(path: Path, ref: str, older_than: float = STALE_LOCK_SECONDS) -> bool:
    """Remove ``ref``'s lock file when a process killed mid-update left it (older than ``older_than``): until then
    every move of that ref fails. Only for a ref this process alone moves (the target, under the leadership)."""
    lock = path / f"{ref}.lock"
    try:
        if time.time() - lock.stat().st_mtime < older_than:
            return False
        lock.unlink()
    except FileNotFoundError:
        return False
    return True


def first_parents(repo: pygit2.Repository, head: str, stop: set[str], limit: int = 100_000) -> list[str]:
    """Commits on the first-parent chain from ``head`` down to (not including) a commit in ``stop``."""
    out: list[str] = []
    commit = repo[head].peel(pygit2.Commit)
    while str(commit.id) not in stop and len(out) < limit:
        out.append(str(commit.id))
        if not commit.parent_ids:
            break
        commit = repo[commit.parent_ids[0]].peel(pygit2.Commit)
    return out


def is_ancestor(repo: pygit2.Repository, ancestor: str, of: str) -> bool:
    return ancestor == of or bool(repo.descendant_of(of, ancestor))


def new_commits(repo: pygit2.Repository, tip: str, hide: list[str], limit: int) -> list[pygit2.Commit]:
    """Commits reachable from ``tip`` but from none of ``hide``, breadth first from ``tip``, at most
    ``limit`` + 1.

    Decided by ancestry, never by commit dates: agents pick their own dates, and a revision walk that
    hides by date-ordered marking lists commits already on ``hide`` when dates run backwards."""
    hidden = [pygit2.Oid(hex=h) for h in hide]

    def known(oid: pygit2.Oid) -> bool:
        return any(oid == h or repo.descendant_of(h, oid) for h in hidden)

    start = pygit2.Oid(hex=tip)
    seen = {start}
    todo = deque([start])
    out: list[pygit2.Commit] = []
    while todo:
        oid = todo.popleft()
        if known(oid):
            continue
        commit = repo[oid].peel(pygit2.Commit)
        out.append(commit)
        if len(out) > limit:
            break
        for parent in commit.parent_ids:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return out


class WalkTooLong(Exception):
    """A revision walk went past its limit before it could answer."""


def first_reached(repo: pygit2.Repository, tips: list[str], hide: list[str], wanted: set[str],
                  limit: int) -> str | None:
    """A commit of ``wanted`` that one of ``tips`` reaches, found in one revision walk over all of them; None when
    none does. Raises ``WalkTooLong`` after ``limit`` commits (libgit2 marks the whole walk before it lists the
    first commit, so the limit bounds what is listed, not that marking).

    Only for ``wanted`` commits that ``hide`` does not reach: the walk may list a few hidden commits when dates
    run backwards (see ``new_commits``), but it never leaves out one that is not hidden, so the answer is exact
    for them."""
    if not tips or not wanted:
        return None
    walker = repo.walk(None)
    for tip in tips:
        walker.push(pygit2.Oid(hex=tip))
    for h in hide:
        walker.hide(pygit2.Oid(hex=h))
    for n, commit in enumerate(walker):
        if n >= limit:
            raise WalkTooLong(f"more than {limit} commits to walk")
        if str(commit.id) in wanted:
            return str(commit.id)
    return None
