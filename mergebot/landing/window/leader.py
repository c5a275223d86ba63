"""Leadership: one process leads each repository's queue, so replicas never land into the same branch at once.

A repository is led by whoever holds its advisory lock (``db.locks.SessionLocks``, one dedicated connection).
Leadership is taken, never given back while the process lives; when the connection dies (the database
restarted, the network broke, the server or a pooler ended it) every lock is gone at once, so this process forgets
what it led and starts over: each repository it leads again is reconciled before its queue moves. It looks at its
locks at the start of every pass (``SessionLocks.held``, at most once a ``CHECK_SECONDS``), so a lock lost between
passes stops its queue at the next one (``lost``: the queue drops their windows); before, a lock lost on a connection
nothing else used went unnoticed and two replicas led one queue (the protocol model's ``lockouts``).
"""

from __future__ import annotations

import time

from mergebot.db.locks import SessionLocks
from mergebot.models import Repo

CHECK_SECONDS = 1.0  # the longest a pass trusts the locks it held at the last look


class Leadership:
    def __init__(self, url: str) -> None:
        self.locks = SessionLocks(url)
        self.leading: set[str] = set()
        self.reconciled: set[str] = set()  # led repositories reconciled since this leadership began
        self.taken: list[str] = []  # the repositories the last ``lead`` took (for the record of who leads)
        self.lost: list[str] = []  # the repositories the last ``lead`` found it no longer led (its lock went)
        self._checked = 0.0

    async def lead(self, repos: list[Repo]) -> list[Repo]:
        """The repositories this process leads, taking the leadership of the ones nobody holds."""
        self.lost = []
        now = time.monotonic()
        if self.leading and now - self._checked >= CHECK_SECONDS:
            self._checked = now
            if await self.locks.held() < len(self.leading):  # the session ended under it: every lock went with it
                self.lost = sorted(self.leading)
                await self.locks.close()
        if not self.locks.alive:
            self.leading.clear()
            self.reconciled.clear()  # a new leadership starts by reconciling
        self.taken = []
        for r in repos:
            if r.name not in self.leading and await self.locks.try_queue_lock(r.name):
                self.leading.add(r.name)
                self.taken.append(r.name)
        return [r for r in repos if r.name in self.leading]

    async def close(self) -> None:
        """Let go of every repository (the next pass, if any, takes them again)."""
        await self.locks.close()
