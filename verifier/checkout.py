"""Checkouts the verifier owns: a slot per worker, moved to the exact commit for every run.

A slot is a directory the caller owns and keeps between runs (one per worker slot); ``None`` in the runner
means a temporary slot, created fresh and deleted after the run. Inside it::

    lock         flock'ed for the whole run: one run per slot at a time
    state.json   the object store the slot borrows from, the commit and tree that tree/ holds, and whether
                 that is known to be true ("clean")
    git/         the slot's git directory: a non-bare repository whose work tree is tree/ and whose object
                 store borrows from the repository's (objects/info/alternates), so no object is copied
    tree/        the checkout: exactly the commit's tree and nothing else (no .git in it)
    run/         scratch of the current run, a filesystem of its own (``verifier.disk``): upper/ and work/ (the
                 overlay), tmp/ (the check's /tmp), shm/ (its /dev/shm)

The rules:

- **Creating** a slot (the first run, a change of repository, or whenever it is not known clean) empties it
  and checks the commit out with libgit2 (``checkout_tree`` with ``FORCE``), then compares tree/ with the
  commit's tree file by file: every tracked file is hashed and its type and executable bit checked, and
  anything else present is an error. No content filters apply (``info/attributes`` unsets text, eol, filter
  and ident for every path; autocrlf is off), so every file is its blob, byte for byte.
- **Moving** a clean slot to another commit applies the difference between the tree it holds and the new
  one (a tree-to-tree diff, computed in libgit2 from the two trees alone): deleted paths are removed (and
  directories left empty with them), added and changed paths are written from their blobs, and each written
  path is hashed back and compared with the new tree, each removed one checked gone. That is the before-run
  tree check for a moved slot: tree/ held the old tree exactly (it was proven when the slot was created and
  after every run since, see below), and every path where the two trees differ now holds the new tree's
  content, so tree/ is the new tree. It costs a write and a hash per *changed* file and nothing per unchanged
  one, where ``checkout_tree`` and ``status`` each stat every path (``python -m bench.verifier`` times both ways).
  Files are replaced by unlinking and creating them, never by truncating or renaming over them, which on ext4
  makes the next rewrite of the same file wait for the disk. The slot's HEAD and index are left as the
  creation wrote them: ``state.json`` is what says which tree tree/ holds.
- **During a sandboxed run** the check sees tree/ through an overlay whose upper layer is run/upper: every
  write, deletion, rename or mode change of the check lands there (deletions as whiteouts), and tree/ itself
  is never writable by the check.
- **After the run** the runner asks what the check changed among the tracked paths. Sandboxed, that is read
  from the upper layer alone: a whiteout on a tracked path, a tracked file whose content, type or executable
  bit differs, a tracked directory replaced by something else (or emptied and refilled differently) count;
  new files anywhere (build outputs, ``__pycache__``, ``.pytest_cache``) do not, and go with run/.
  Unsandboxed, the check wrote into tree/ itself, so the whole of tree/ is hashed again against the tree
  and every untracked path is removed. Either way a change to a tracked file makes the result an error
  (never a pass) and marks the slot dirty, so it is recreated before its next use.
- **A crash** anywhere between the start of a move and the end of the after-run check leaves the slot
  marked dirty (``clean`` is written false first), so the next run recreates it; so does anything that looks
  off while moving (a missing old tree, a path that does not hash to its blob, a filesystem error).
- **tree/ belongs to the verifier.** Nothing but the code here writes it: a change made to it from outside,
  between runs, is not looked for (a crash of the verifier is: see the previous rule).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy, DeltaStatus, FileMode, RepositoryInitFlag

from verifier.disk import RunFs, sweep
from verifier.sandbox import Overlay
from verifier.treefs import CheckoutError as CheckoutError  # raised here, caught by the runner
from verifier.treefs import (
    changed_in_upper,
    compare_tree,
    create,
    listing,
    prune_empty,
    remove,
    safe_path,
    same_entry,
    write_entry,
)

log = logging.getLogger(__name__)

ATTRIBUTES = "* -text -eol -crlf -filter -ident -working-tree-encoding\n"
SLOT_CONFIG: dict[str, str | bool] = {
    "core.autocrlf": False, "core.filemode": True, "core.symlinks": True, "core.ignorecase": False,
    "core.precomposeunicode": False, "core.safecrlf": False, "core.logallrefupdates": False, "gc.auto": "0",
}


@dataclass(frozen=True)
class Prepared:
    commit_sha: str
    tree_sha: str
    fresh: bool  # the slot was (re)created for this run


def objects_dir(repo: pygit2.Repository) -> Path:
    """The object store of a repository (bare or not; a linked worktree's common one)."""
    gitdir = Path(repo.path)
    common = gitdir / "commondir"
    if common.is_file():
        gitdir = (gitdir / common.read_text().strip()).resolve()
    return (gitdir / "objects").resolve()


@dataclass(frozen=True)
class RunDirs:
    """One run's scratch (all on ``fs`` when it has one)."""

    tmp: Path
    shm: Path
    overlay: Overlay | None
    fs: RunFs | None


class Slot:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()
        self.git_dir = self.root / "git"
        self.tree_dir = self.root / "tree"
        self.run_dir = self.root / "run"
        self._state_path = self.root / "state.json"
        self._state: dict[str, object] = {}

    # -- locking and state -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_state(self) -> dict[str, object]:
        try:
            data = json.loads(self._state_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self, **state: object) -> None:
        self._state = state
        create(self._state_path, json.dumps(state).encode(), 0o644)  # torn or missing: the slot is recreated

    def mark(self, *, clean: bool) -> None:
        """Record whether tree/ is known to be exactly the tree that ``state.json`` names."""
        self._write_state(**{**(self._state or self._read_state()), "clean": clean})

    # -- materializing -----------------------------------------------------------------------------------

    def prepare(self, repo_path: Path, commit_sha: str) -> Prepared:
        """Make tree/ the tree of ``commit_sha`` (of ``repo_path``) and prove it, before anything runs."""
        try:
            source = pygit2.Repository(str(repo_path))
            tree_sha = str(source[commit_sha].peel(pygit2.Commit).tree_id)
        except (KeyError, ValueError, pygit2.GitError) as e:
            raise CheckoutError(f"commit {commit_sha} is not in {repo_path}: {e}") from e
        objects = str(objects_dir(source))
        self.root.mkdir(parents=True, exist_ok=True)
        state = self._read_state()
        held = state.get("tree")
        reusable = (state.get("clean") is True and state.get("objects") == objects and isinstance(held, str)
                    and self.git_dir.is_dir() and self.tree_dir.is_dir())
        # From here until the after-run check says otherwise, the slot is not trusted.
        self._write_state(objects=objects, commit=state.get("commit"), tree=held, clean=False)
        if reusable and isinstance(held, str):
            try:
                self._move(held, tree_sha)
                self._write_state(objects=objects, commit=commit_sha, tree=tree_sha, clean=False)
                return Prepared(commit_sha, tree_sha, fresh=False)
            except (CheckoutError, pygit2.GitError, KeyError, ValueError, OSError) as e:
                log.warning("slot %s could not be moved to %s, recreating it: %s", self.root, commit_sha, e)
        self._recreate(Path(objects))
        self._fresh_checkout(commit_sha)
        self._write_state(objects=objects, commit=commit_sha, tree=tree_sha, clean=False)
        return Prepared(commit_sha, tree_sha, fresh=True)

    def _recreate(self, objects: Path) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for d in (self.run_dir, self.tree_dir, self.git_dir):
            remove(d)
        repo = pygit2.init_repository(str(self.git_dir), bare=False, workdir_path=str(self.tree_dir),
                                      flags=RepositoryInitFlag.MKPATH | RepositoryInitFlag.NO_DOTGIT_DIR)
        (self.tree_dir / ".git").unlink(missing_ok=True)  # the repository is opened by its git dir
        (self.git_dir / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (self.git_dir / "objects" / "info" / "alternates").write_text(f"{objects}\n")
        (self.git_dir / "info").mkdir(exist_ok=True)
        (self.git_dir / "info" / "attributes").write_text(ATTRIBUTES)
        for key, value in SLOT_CONFIG.items():
            repo.config[key] = value

    def _fresh_checkout(self, commit_sha: str) -> None:
        repo = pygit2.Repository(str(self.git_dir))
        commit = repo[commit_sha].peel(pygit2.Commit)
        repo.checkout_tree(commit.tree, strategy=CheckoutStrategy.FORCE)  # type: ignore[no-untyped-call]
        repo.set_head(commit.id)
        bad, extra = compare_tree(repo, commit.tree, self.tree_dir)
        if bad or extra:
            raise CheckoutError(f"the checkout is not tree {commit.tree_id}: differs at {listing(bad)}; "
                                f"untracked: {listing(extra)}")

    def _move(self, old_tree: str, new_tree: str) -> None:
        """Apply the difference between two trees to tree/ (which holds ``old_tree``) and verify every path."""
        if old_tree == new_tree:
            return
        repo = pygit2.Repository(str(self.git_dir))
        diff = repo[old_tree].peel(pygit2.Tree).diff_to_tree(repo[new_tree].peel(pygit2.Tree))
        removed: list[str] = []
        written: list[tuple[str, pygit2.Oid, int]] = []
        for delta in diff.deltas:
            if delta.status in (DeltaStatus.DELETED, DeltaStatus.TYPECHANGE):
                removed.append(safe_path(delta.old_file.raw_path))
            if delta.status in (DeltaStatus.ADDED, DeltaStatus.MODIFIED, DeltaStatus.TYPECHANGE):
                written.append((safe_path(delta.new_file.raw_path), delta.new_file.id, delta.new_file.mode))
            elif delta.status != DeltaStatus.DELETED:
                raise CheckoutError(f"unexpected change {delta.status!r} at {delta.new_file.path}")
        rewritten = {w[0] for w in written}
        root = self.tree_dir
        for rel in removed:
            remove(root / rel)
        for rel in sorted({str(Path(r).parent) for r in removed}, key=lambda p: -p.count("/")):
            prune_empty(root, rel)
        for rel, oid, mode in written:
            write_entry(repo, root / rel, oid, mode)
        for rel in removed:
            if rel not in rewritten and os.path.lexists(root / rel):
                raise CheckoutError(f"{rel} is still there after it was removed")
        for rel, oid, mode in written:
            st = os.lstat(root / rel)
            if not (stat.S_ISDIR(st.st_mode) if mode == FileMode.COMMIT else same_entry(str(root / rel), st, mode,
                                                                                        str(oid))):
                raise CheckoutError(f"{rel} does not hold {oid} after it was written")

    # -- one run -----------------------------------------------------------------------------------------

    def run_dirs(self, *, overlay: bool, disk_limit: int | None = None) -> RunDirs:
        """Fresh scratch for one run, on a filesystem of its own when ``disk_limit`` is given
        (``verifier.disk``): the check's temporary directory (with a home in it), its ``/dev/shm`` and the
        overlay. Without the overlay the check writes into tree/ itself, so a polled limit measures tree/ too."""
        self._drop_run_dir()
        self.run_dir.mkdir(parents=True)
        fs = None
        if disk_limit is not None:
            fs = RunFs.make(self.run_dir, disk_limit, mount=overlay)
            if not overlay:
                fs.watch(self.tree_dir)
        try:
            tmp = self.run_dir / "tmp"
            (tmp / "home").mkdir(parents=True)
            shm = self.run_dir / "shm"
            shm.mkdir(mode=0o1777)
            layers = None
            if overlay:
                layers = Overlay(self.run_dir / "upper", self.run_dir / "work")
                layers.upper.mkdir()
                layers.work.mkdir()
        except BaseException:
            if fs is not None:
                fs.close()
            raise
        return RunDirs(tmp, shm, layers, fs)

    def _drop_run_dir(self) -> None:
        """Remove run/, unmounting first whatever a run left mounted there (a runner that died mid-run)."""
        sweep(self.run_dir)
        remove(self.run_dir)

    def give_to(self, uid: int, dirs: RunDirs) -> None:
        """Make tree/ and the run's writable directories ``uid``'s (a check that runs as its own uid, where no pids
        control group can be made): files in tree/ it may then write through the overlay, as root could; what it
        changes is still only in the upper layer. Ownership is not part of a tree, so the tree checks ignore it."""
        # Everything under tree/, not tree/ itself: libgit2 refuses a work tree someone else owns, and the
        # check's view of the checkout's root is the upper layer's root, which is the uid's.
        for folder, subdirs, files in os.walk(self.tree_dir):
            for name in [*subdirs, *files]:
                path = os.path.join(folder, name)
                if os.lstat(path).st_uid != uid:
                    os.lchown(path, uid, uid)
        for d in (dirs.tmp, dirs.tmp / "home", dirs.shm, *((dirs.overlay.upper,) if dirs.overlay else ())):
            os.chown(d, uid, uid)

    def changed_in_overlay(self, tree_sha: str, upper: Path) -> list[str]:
        """The tracked paths the check changed, read from the overlay's upper layer."""
        repo = pygit2.Repository(str(self.git_dir))
        return changed_in_upper(repo, repo[tree_sha].peel(pygit2.Tree), upper, "")

    def changed_in_place(self, tree_sha: str) -> list[str]:
        """The tracked paths that differ in tree/ (hashing everything); untracked paths are removed."""
        repo = pygit2.Repository(str(self.git_dir))
        bad, extra = compare_tree(repo, repo[tree_sha].peel(pygit2.Tree), self.tree_dir)
        for rel in extra:
            remove(self.tree_dir / rel)
        return bad

    def end_run(self, *, clean: bool, fs: RunFs | None = None) -> None:
        if fs is not None:
            fs.close()
        self._drop_run_dir()
        self.mark(clean=clean)
