"""A git tree and a directory on disk, compared and written entry by entry (``verifier.checkout``'s slots use it).

``compare_tree`` says which paths of a directory differ from a tree and which are untracked; ``changed_in_upper``
reads only what an overlay's upper layer holds (what a sandboxed run wrote), taking a directory the overlay made
opaque as a whole subtree again; ``write_entry`` writes one blob or symlink as git records it. Paths from a tree
are checked before they are used (``safe_path``): none leaves the directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

OPAQUE = "trusted.overlay.opaque"


class CheckoutError(Exception):
    """The commit could not be materialized, or the checkout is not its tree."""


def _entries(tree: pygit2.Tree) -> dict[str, pygit2.Object]:
    return {os.fsdecode(obj.raw_name or b""): obj for obj in tree}


def compare_tree(repo: pygit2.Repository, tree: pygit2.Tree, directory: Path,
                 prefix: str = "") -> tuple[list[str], list[str]]:
    """Compare a directory with a tree by content: (tracked paths that differ or are missing, untracked paths)."""
    bad: list[str] = []
    extra: list[str] = []
    try:
        present = {e.name: e for e in os.scandir(directory)}
    except OSError:
        return [prefix.rstrip("/") or "."], []
    for name, obj in _entries(tree).items():
        path = prefix + name
        entry = present.pop(name, None)
        if entry is None:
            bad.append(path)
            continue
        mode = obj.filemode
        if mode == FileMode.TREE:
            if entry.is_dir(follow_symlinks=False):
                sub_bad, sub_extra = compare_tree(repo, repo[obj.id].peel(pygit2.Tree), Path(entry.path), path + "/")
                bad += sub_bad
                extra += sub_extra
            else:
                bad.append(path)
        elif mode == FileMode.COMMIT:  # a submodule: an empty directory in a checkout
            if entry.is_dir(follow_symlinks=False):
                extra += [f"{path}/{n}" for n in os.listdir(entry.path)]
            else:
                bad.append(path)
        elif not same_entry(entry.path, entry.stat(follow_symlinks=False), mode, str(obj.id)):
            bad.append(path)
    extra += [prefix + n for n in present]
    return bad, extra


def same_entry(path: str, st: os.stat_result, mode: int, oid: str) -> bool:
    if mode == FileMode.LINK:
        return stat.S_ISLNK(st.st_mode) and str(pygit2.hash(os.fsencode(os.readlink(path)))) == oid
    if not stat.S_ISREG(st.st_mode):
        return False
    if bool(st.st_mode & stat.S_IXUSR) != (mode == FileMode.BLOB_EXECUTABLE):
        return False
    return str(pygit2.hashfile(path)) == oid


def write_entry(repo: pygit2.Repository, path: Path, oid: pygit2.Oid, mode: int) -> None:
    """Write one tree entry (blob, executable blob, symlink or submodule directory) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == FileMode.COMMIT:
        path.mkdir(exist_ok=True)
        return
    data = repo[oid].peel(pygit2.Blob).data
    if mode == FileMode.LINK:
        remove(path)
        os.symlink(os.fsdecode(data), path)
    else:
        create(path, data, 0o755 if mode == FileMode.BLOB_EXECUTABLE else 0o644)


def create(path: Path, data: bytes, perm: int) -> None:
    """Replace ``path`` with a new file holding ``data``.

    A new inode rather than truncating or renaming over the old one: ext4 starts writing back a file that
    replaces another by truncation or rename (``auto_da_alloc``), and the next truncation of that file waits
    for the disk; unlink and create costs no I/O wait.
    """
    remove(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, perm)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, perm)
    finally:
        os.close(fd)


def safe_path(raw: bytes) -> str:
    """A tree path that stays inside the checkout (libgit2's checkout refuses the same ones)."""
    parts = raw.split(b"/")
    if any(p in (b"", b".", b"..") or p.lower() == b".git" or b"\0" in p for p in parts):
        raise CheckoutError(f"refusing to write the path {raw!r}")
    return os.fsdecode(raw)


def prune_empty(root: Path, rel: str) -> None:
    """Remove ``rel`` and its parents while they are empty directories (git trees have no empty ones)."""
    while rel not in ("", "."):
        try:
            (root / rel).rmdir()
        except OSError:
            return
        rel = str(Path(rel).parent)


def changed_in_upper(repo: pygit2.Repository, tree: pygit2.Tree, upper: Path, prefix: str) -> list[str]:
    bad: list[str] = []
    tracked = _entries(tree)
    with os.scandir(upper) as entries:
        for entry in entries:
            obj = tracked.get(entry.name)
            if obj is None:
                continue  # untracked here (the lower layer holds only tracked paths): new output
            path = prefix + entry.name
            st = entry.stat(follow_symlinks=False)
            if whiteout(st):
                bad.append(path)  # a whiteout: the tracked path was deleted (or renamed away)
            elif obj.filemode == FileMode.TREE:
                if not stat.S_ISDIR(st.st_mode):
                    bad.append(path)
                elif opaque(entry.path):  # deleted and made again: it must now hold the whole subtree
                    bad += compare_tree(repo, repo[obj.id].peel(pygit2.Tree), Path(entry.path), path + "/")[0]
                else:
                    bad += changed_in_upper(repo, repo[obj.id].peel(pygit2.Tree), Path(entry.path), path + "/")
            elif obj.filemode == FileMode.COMMIT:
                if not stat.S_ISDIR(st.st_mode):
                    bad.append(path)
            elif not same_entry(entry.path, st, obj.filemode, str(obj.id)):
                bad.append(path)
    return sorted(bad)


def whiteout(st: os.stat_result) -> bool:
    """An overlay upper layer's mark of a deleted path: a character device numbered 0/0."""
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def opaque(path: str | Path) -> bool:
    """An overlay upper layer's directory that replaces the lower one whole (deleted and made again)."""
    try:
        return os.getxattr(path, OPAQUE, follow_symlinks=False) == b"y"
    except OSError:
        return False


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def listing(paths: list[str], limit: int = 20) -> str:
    if not paths:
        return "none"
    shown = ", ".join(paths[:limit])
    return shown + (f" (and {len(paths) - limit} more)" if len(paths) > limit else "")
