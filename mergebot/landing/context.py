"""What every step of every repository's queue shares (``Context``), and the drills' crash hooks.

A step takes the context and asks it for the database, a repository's bare path, the queue's settings and the
process's wake-up calls; where main lives is ``target.target_for(ctx, repo)``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from securesystemslib.signer import CryptoSigner

from mergebot.attest import keys
from mergebot.db.database import Database
from mergebot.git import repo as git
from mergebot.models import Repo


def crash_point(name: str) -> None:
    """Test hooks for the drills, at the named step: SIGKILL this process when MERGEBOT_CRASH_AT names it; hold the
    queue still when MERGEBOT_PAUSE_AT is ``name:FILE`` and FILE exists, until FILE is gone (FILE.reached says it
    got there), so a drill can kill PostgreSQL at exactly this step. In ``mergebot serve`` it holds the landing
    thread (the queue and the in-process workers: ``mergebot.api.landing_thread``); requests are answered meanwhile."""
    if os.environ.get("MERGEBOT_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
    step, _, flag = os.environ.get("MERGEBOT_PAUSE_AT", "").partition(":")
    if step == name and flag and os.path.exists(flag):
        Path(flag + ".reached").touch()
        while os.path.exists(flag):
            time.sleep(0.05)  # blocking on purpose: nothing of this loop moves while it is held


@dataclass
class Published:
    """What this process pushed to forge queue branches and has not deleted yet, and what its sweeps found, by
    repository (``target.Forge.publish`` and ``tidy``)."""

    shas: dict[str, set[str]] = field(default_factory=dict)
    jobless: dict[str, set[str]] = field(default_factory=dict)  # seen on the forge with no job by the last sweep
    swept: dict[str, float] = field(default_factory=dict)  # when each repository's queue branches were last swept

    def forget(self, repo: str) -> None:
        """A new leadership sweeps at once: what the last leader left is found on the forge."""
        self.swept.pop(repo, None)


@dataclass
class Context:
    """What every step of every repository's queue shares."""

    db: Database
    root: Path
    poll: float = 1.0
    slack: float = 600.0  # beyond three check timeouts, how long a run may take before it counts as lost
    retry_failures: bool = True  # a failing check runs once more on the same commit (flakiness)
    post_land_rerun: bool = False  # run the post-land check even on a commit a run passed on
    max_passes: int = 4  # a risk-aware queue passes a candidate over at most this many times (``candidate_next``)
    on_job: list[asyncio.Event] = field(default_factory=list)  # in-process workers' wake-up calls
    post_land: set[asyncio.Task[None]] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # the queue's own: something changed
    published: Published = field(default_factory=Published)  # commits this process put on forge queue branches

    notes_locks: dict[str, asyncio.Lock] = field(default_factory=dict)  # one writer of a repository's git notes
    attest_dir: Path | None = None  # the signing key's folder (``Settings.attest_folder``); None: the data directory's
    key: CryptoSigner | None = None  # the signing key, loaded at first use (``signer``)
    key_stamp: tuple[int, int] = (0, 0)  # the key file's inode and change time when it was loaded

    def poke(self) -> None:
        self.wake.set()

    @property
    def key_folder(self) -> Path:
        """Where the signing key and the trust file live: ``attest_dir``, or ``attest`` in the data directory whose
        ``repos`` is ``root``."""
        return self.attest_dir or self.root.parent / "attest"

    def signer(self) -> CryptoSigner:
        """The key every landing statement is signed with: the key folder's (``attest_dir``), made there if it has
        none, and read again once it was replaced (a rotation)."""
        path = keys.key_path(self.key_folder)
        try:
            st = path.stat()
            stamp = (st.st_ino, st.st_mtime_ns)
        except OSError:
            stamp = (0, 0)
        if self.key is None or stamp != self.key_stamp:  # first use, or ``mergebot attest rotate`` replaced it
            self.key = keys.signer(self.key_folder)
            st = path.stat()
            self.key_stamp = (st.st_ino, st.st_mtime_ns)
        return self.key

    def retry_for(self, repo: Repo) -> bool:
        """Whether a failing check of ``repo`` runs once more: its own queue rule, else the server's."""
        return self.retry_failures if repo.retry_failed_checks is None else repo.retry_failed_checks

    def path(self, repo: Repo) -> Path:
        return git.bare_path(self.root, repo.name)
