"""The landing benchmark's repository (``python -m bench.landing``): a generated project, its commits and the git
commands, and the tables' rows.
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import TypeVar

import pygit2

from bench.common import measure
from bench.common.measure import pctl

T = TypeVar("T")
NOOP = "true"
AUTHOR = pygit2.Signature("Bench", "bench@localhost", 1_700_000_000, 0)


# -- figures ------------------------------------------------------------------------------------------------


fmt = functools.partial(measure.fmt, sep="")


def stats(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0, "median": float("nan"), "p95": float("nan"), "mean": float("nan"),
                "min": float("nan"), "max": float("nan")}
    return {"n": len(xs), "median": statistics.median(xs), "p95": pctl(xs, 0.95), "mean": statistics.fmean(xs),
            "min": min(xs), "max": max(xs)}


def row(label: str, xs: list[float], share_of: float | None = None) -> str:
    s = stats(xs)
    share = f"{100 * s['median'] / share_of:5.1f}%" if share_of and xs else ""
    return f"  {label:<64} {fmt(s['median'], 2):>9} {fmt(s['p95'], 2):>9} {fmt(s['max'], 2):>9}  {share}"


def header(first: str) -> str:
    line = f"  {first:<64} {'median':>9} {'p95':>9} {'max':>9}  share"
    return line + "\n  " + "-" * (len(line) - 2)


# -- repositories -------------------------------------------------------------------------------------------


def file_path(i: int) -> str:
    return f"pkg{i // 100:03d}/mod{i % 100:03d}.txt"


def file_text(i: int, extra: str = "") -> str:
    lines = 8 + (i * 7919) % 120  # 8..127 lines, about 0.3 to 5 KB
    body = "".join(f"file {i} line {n}: the quick brown fox jumps over the lazy dog {(i * n) % 997}\n"
                   for n in range(lines))
    return body + extra


def generate_repo(path: Path, files: int) -> tuple[str, int]:
    """A bare repository with one commit on main holding ``files`` files. Returns (sha, total bytes)."""
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
    dirs: dict[str, pygit2.TreeBuilder] = {}
    total = 0
    for i in range(files):
        d, name = file_path(i).split("/")
        data = file_text(i).encode()
        total += len(data)
        dirs.setdefault(d, repo.TreeBuilder()).insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
    top = repo.TreeBuilder()
    top.insert("README.txt", repo.create_blob(b"A generated repository for bench/landing/run.py.\n"),
               pygit2.enums.FileMode.BLOB)
    for d, tb in sorted(dirs.items()):
        top.insert(d, tb.write(), pygit2.enums.FileMode.TREE)
    sha = repo.create_commit("refs/heads/main", AUTHOR, AUTHOR, "generated: initial commit", top.write(), [])
    return str(sha), total


def make_commit(repo: pygit2.Repository, parent: str, index: int, tag: str) -> str:
    """A commit on ``parent`` that appends one line to file ``index``; no ref is written."""
    tree = pygit2.Index()
    tree.read_tree(repo[parent].peel(pygit2.Commit).tree)
    path = file_path(index)
    old = repo[tree[path].id].peel(pygit2.Blob).data.decode()
    tree.add(pygit2.IndexEntry(path, repo.create_blob((old + f"{tag}\n").encode()), pygit2.enums.FileMode.BLOB))
    sha = repo.create_commit(None, AUTHOR, AUTHOR, f"bench: {tag}", tree.write_tree(repo),
                             [pygit2.Oid(hex=parent)])
    return str(sha)


def touched_file(k: int, files: int) -> int:
    """A different file for each landing or push (stride coprime with 100, wrapping)."""
    return (k * 37 + 11) % files


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MERGEBOT_", "GIT_"))}
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def run(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> float:
    """Run a command, fail loudly on error; returns its wall time in ms."""
    t0 = time.perf_counter()
    out = subprocess.run(args, cwd=cwd, env=env or git_env(), capture_output=True, text=True, check=False)
    ms = (time.perf_counter() - t0) * 1000
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} ... failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return ms


GIT = ["git", "-c", "user.name=Bench", "-c", "user.email=bench@localhost", "-c", "advice.detachedHead=false"]
