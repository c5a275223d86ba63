"""Leadership: one process leads each repository's queue, so replicas never land into the same branch at once.

A repository is led by whoever holds its advisory lock (``db.locks.SessionLocks``, one dedicated connection).
Leadership is taken, never given back while the process lives; when the connection dies (the database
restarted, the network broke) every lock is gone at once, so this process forgets what it led and starts over:
each repository it leads again is reconciled before its queue moves.
"""

from __future__ import annotations

from mergebot.db.locks import SessionLocks
from mergebot.models import Repo


class Leadership:
    def __init__(self, url: str) -> None:
        self.locks = SessionLocks(url)
        self.leading: set[str] = set()
        self.reconciled: set[str] = set()  # led repositories reconciled since this leadership began
        self.taken: list[str] = []  # the repositories the last ``lead`` took (for the record of who leads)

    async def lead(self, repos: list[Repo]) -> list[Repo]:
        """The repositories this process leads, taking the leadership of the ones nobody holds."""
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
