"""Run a repository's check on one exact commit and return the evidence.

This is the plain runner: a fresh checkout of the commit's tree in a temporary directory, the configured
command in a subprocess with a time limit that kills the whole process group, a scrubbed environment, and a
bounded log (head and tail kept, full size and SHA-256 recorded). The sandbox is recorded as ``none``.
It refuses to report on any tree other than the one it was asked about: the checkout's tree is compared with
the commit's before the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import CheckoutStrategy

LOG_HEAD = 16 * 1024
LOG_TAIL = 48 * 1024
# Only these variables reach the check; tokens, database URLs and the bot's own settings never do.
PASS_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONHASHSEED")


@dataclass
class Result:
    commit_sha: str
    tree_sha: str
    command: str
    outcome: str  # pass, fail, timeout, error
    exit_code: int | None
    duration_ms: int
    log_head: str
    log_tail: str
    log_size: int
    log_digest: str
    sandbox: str = "none"

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def excerpt(self, lines: int = 15) -> str:
        tail = (self.log_tail or self.log_head).rstrip().splitlines()
        return "\n".join(tail[-lines:])


def materialize(repo_path: Path, commit_sha: str, into: Path) -> str:
    """Write the commit's tree into ``into`` (an empty directory) and return its tree sha."""
    repo = pygit2.Repository(str(repo_path))
    commit = repo[commit_sha].peel(pygit2.Commit)
    repo.checkout_tree(commit.tree, directory=str(into), strategy=CheckoutStrategy.FORCE)  # type: ignore[no-untyped-call]
    return str(commit.tree_id)


def tree_of_directory(path: Path) -> str:
    """The git tree sha of a directory's files (regular files and symlinks; modes as git records them)."""
    scratch = pygit2.init_repository(tempfile.mkdtemp(prefix="mb-tree-"), bare=True)
    try:
        return str(_write_tree(scratch, path))
    finally:
        shutil.rmtree(scratch.path, ignore_errors=True)


def _write_tree(repo: pygit2.Repository, path: Path) -> pygit2.Oid:
    tb = repo.TreeBuilder()
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.name == ".git":
            continue
        if entry.is_symlink():
            tb.insert(entry.name, repo.create_blob(os.readlink(entry.path).encode()), pygit2.enums.FileMode.LINK)
        elif entry.is_dir():
            sub = _write_tree(repo, Path(entry.path))
            if len(repo[sub].peel(pygit2.Tree)) > 0:
                tb.insert(entry.name, sub, pygit2.enums.FileMode.TREE)
        else:
            mode = pygit2.enums.FileMode.BLOB_EXECUTABLE if os.access(entry.path, os.X_OK) \
                else pygit2.enums.FileMode.BLOB
            tb.insert(entry.name, repo.create_blob_fromdisk(entry.path), mode)
    return tb.write()


def run_check(repo_path: Path, commit_sha: str, command: str, timeout: float) -> Result:
    """Check out ``commit_sha`` fresh, run ``command`` there, and return the evidence."""
    work = Path(tempfile.mkdtemp(prefix="mb-verify-"))
    start = time.monotonic()
    try:
        checkout = work / "checkout"
        checkout.mkdir()
        tree_sha = materialize(repo_path, commit_sha, checkout)
        seen = tree_of_directory(checkout)
        if seen != tree_sha:
            return _error(commit_sha, tree_sha, command, start, f"checkout tree {seen} is not {tree_sha}")
        return _run(checkout, work, commit_sha, tree_sha, command, timeout, start)
    except (pygit2.GitError, KeyError, ValueError, OSError) as e:
        return _error(commit_sha, "", command, start, f"could not prepare the check: {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(checkout: Path, work: Path, commit_sha: str, tree_sha: str, command: str, timeout: float,
         start: float) -> Result:
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.update(HOME=str(work), TMPDIR=str(work), CI="true", PYTHONDONTWRITEBYTECODE="1")
    log_path = work / "log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=checkout, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout)
            outcome = "pass" if code == 0 else "fail"
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code, outcome = None, "timeout"
    head, tail, size, digest = read_log(log_path)
    return Result(commit_sha, tree_sha, command, outcome, code, int((time.monotonic() - start) * 1000),
                  head, tail, size, digest)


def read_log(path: Path) -> tuple[str, str, int, str]:
    """Head and tail of a log of any size, its full size and SHA-256, reading it once."""
    digest = hashlib.sha256()
    size = 0
    head = b""
    tail = b""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
            if len(head) < LOG_HEAD:
                head += chunk[: LOG_HEAD - len(head)]
            tail = (tail + chunk)[-LOG_TAIL:]
    if size <= LOG_HEAD:
        tail = b""
    return (head.decode("utf-8", "replace"), tail.decode("utf-8", "replace"), size, digest.hexdigest())


def _error(commit_sha: str, tree_sha: str, command: str, start: float, message: str) -> Result:
    digest = hashlib.sha256(message.encode()).hexdigest()
    return Result(commit_sha, tree_sha, command, "error", None, int((time.monotonic() - start) * 1000),
                  message, "", len(message), digest)
