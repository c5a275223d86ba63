"""Warm, poison-proof caches for checks: generations a run on main writes and every other run only reads.

A repository declares cache paths inside the checkout (``.venv``, ``.mypy_cache``, ...) and optionally key files
(lockfiles): the cache's **key** is a digest of the paths and of the key files' contents at the commit (read
from git, not from the checkout), so a changed lockfile starts a new line of generations. Under
``root/<key>/`` each **generation** ``gen-<n>`` holds files at the cache paths in ``tree/``, laid out like the
checkout, and a ``COMPLETE`` record written last: a directory without it (a run that died mid-write) is never
used, and is swept.

How a run uses it (``verifier.runner``; only in the bwrap sandbox, whose overlay makes this possible):

* every run mounts the newest complete generation for its key as a **lower layer** of the checkout's overlay,
  under the checkout's own tree: the check reads the cache and writes wherever it likes, and every write lands
  in the run's upper layer, thrown away with the run. No run can change a generation;
* only a run asked to **write** (the queue asks for runs on commits already on main: base and post-land checks)
  turns what it left at the cache paths (the generation it read, plus its upper layer's changes there) into
  the next generation (``harvest``), and only when the check ran to its end.

A run with no generation for its key is a **miss**: it runs from scratch and says so (``Use.note``). Without the
sandbox there is no read-only layer to give, so the cache is not used at all and the run says that instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from verifier.treefs import opaque, whiteout

COMPLETE = "COMPLETE"


@dataclass(frozen=True)
class Request:
    """What a run is asked to do with the repository's caches."""

    root: Path  # this repository's caches, on the verifier's disk
    paths: tuple[str, ...]  # cache paths inside the checkout (relative, no "..")
    key_files: tuple[str, ...] = ()  # files whose content keys the cache (lockfiles)
    write: bool = False  # the commit is on main: its run may write the next generation
    pin: int | None = None  # read exactly this generation (a reviewer's re-run of a recorded run), not the newest
    scope: str = ""  # a named check's name: its generations are its own, never another check's (issue 43)


@dataclass(frozen=True)
class Use:
    """What a run did with the cache: the evidence a reviewer's re-run needs."""

    key: str
    generation: int | None  # the generation it read (None: a miss)
    wrote: int | None = None  # the generation it wrote, if any
    note: str = ""

    def as_json(self) -> dict[str, object]:
        return {"key": self.key, "generation": self.generation, "wrote": self.wrote, "note": self.note}


def valid_path(path: str) -> bool:
    parts = path.strip("/").split("/")
    return bool(path) and not path.startswith("/") and all(p not in ("", ".", "..", ".git") for p in parts)


def key_of(repo: pygit2.Repository, commit_sha: str, req: Request) -> str:
    """The cache key at a commit: its paths, and each key file's blob id there (or its absence)."""
    tree = repo[commit_sha].peel(pygit2.Commit).tree
    h = hashlib.sha256()
    if req.scope:  # a named check's line of generations (none: the single check's, keyed as it always was)
        h.update(f"check {req.scope}\n".encode())
    for p in sorted(req.paths):
        h.update(f"path {p}\n".encode())
    for f in sorted(req.key_files):
        try:
            blob = str(tree[f].id)
        except KeyError:
            blob = "-"
        h.update(f"key {f} {blob}\n".encode())
    return h.hexdigest()[:32]


def _generations(line: Path) -> list[tuple[int, Path]]:
    out = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(line):
            name = entry.name
            if name.startswith("gen-") and name[4:].isdigit() and (Path(entry.path) / COMPLETE).is_file():
                out.append((int(name[4:]), Path(entry.path)))
    return sorted(out)


def newest(root: Path, key: str, only: int | None = None) -> tuple[int, Path] | None:
    """The newest complete generation for ``key`` (or exactly generation ``only``) and its files
    (``gen-<n>/tree``), if any; one whose record is missing, unreadable or not its own is not."""
    for number, path in reversed(_generations(root / key)):
        if only is not None and number != only:
            continue
        try:
            record = json.loads((path / COMPLETE).read_text())
        except (OSError, ValueError):
            continue
        if record.get("key") == key and record.get("generation") == number and (path / "tree").is_dir():
            return number, path / "tree"
    return None


def harvest(upper: Path, base: Path | None, paths: Sequence[str], root: Path, key: str,
            commit_sha: str) -> int:
    """The next generation for ``key``: ``base``'s files at the cache paths with the run's upper layer's changes
    there applied (overlay whiteouts delete, opaque directories replace). Written under a temporary name and
    renamed into place once its ``COMPLETE`` record is written. Returns its number."""
    line = root / key
    line.mkdir(parents=True, exist_ok=True)
    for leftover in line.glob("tmp-*"):  # a harvest that died half-way: never used, swept here
        shutil.rmtree(leftover, ignore_errors=True)
    number = (newest(root, key) or (0, None))[0] + 1
    work = line / f"tmp-{number}-{os.getpid()}"
    (work / "tree").mkdir(parents=True)
    for rel in paths:
        src = base / rel if base is not None else None
        if src is not None and (src.exists() or src.is_symlink()):
            _copy(src, work / "tree" / rel)
        _apply(upper / rel, work / "tree" / rel)
    (work / COMPLETE).write_text(json.dumps({"key": key, "generation": number, "commit": commit_sha,
                                             "paths": list(paths), "at": time.time()}))
    final = line / f"gen-{number}"
    if final.exists():  # another writer got there first: keep theirs
        shutil.rmtree(work, ignore_errors=True)
        return number
    work.rename(final)
    for _, path in _generations(line)[:-2]:  # keep the newest two: a run reading the previous one finishes
        shutil.rmtree(path, ignore_errors=True)
    return number


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink() or not src.is_dir():
        shutil.copy2(src, dst, follow_symlinks=False)
    else:
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _apply(change: Path, into: Path) -> None:
    """Apply one overlay upper-layer entry (and everything under it) onto ``into``."""
    if not (change.exists() or change.is_symlink()):
        return
    if whiteout(change.lstat()):
        _remove(into)
        return
    mode = change.lstat().st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # fifos, sockets, devices: not kept
        return
    if change.is_dir() and not change.is_symlink():
        if opaque(change) or (into.exists() and not into.is_dir()):
            _remove(into)
        into.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(change):
            _apply(Path(entry.path), into / entry.name)
        return
    _remove(into)
    into.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(change, into, follow_symlinks=False)


def use_for(repo_path: Path, commit_sha: str, req: Request | None, mode: str) -> Use | None:
    """Which generation a run reads (``generation`` -1: the cache is not used at all)."""
    if req is None:
        return None
    try:
        key = key_of(pygit2.Repository(str(repo_path)), commit_sha, req)
    except (pygit2.GitError, KeyError, ValueError) as e:
        return Use("", -1, note=f"cache not used: its key could not be read ({e})")
    if mode != "bwrap":
        return Use(key, -1, note="cache not used: without the bwrap sandbox there is no read-only layer to "
                                 "give the check")
    found = newest(req.root, key, req.pin)
    if found is None:
        missing = (f"generation {req.pin} is no longer kept" if req.pin is not None
                   else "no complete generation for this key")
        return Use(key, None, note=f"cache miss: {missing}; the check ran from scratch")
    return Use(key, found[0], note=f"cache generation {found[0]}, read-only")
