"""Advisory locks held for as long as a connection lives: which process leads which repository's queue.

A session-level lock lives with its connection, so the locks are held on one dedicated connection (never a
pooled one, which would hand the lock to whoever borrows it next). When that connection dies, PostgreSQL
releases the locks and another replica may take them: ``alive`` turns false and the holder starts over.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg

from mergebot.db.base import translated
from mergebot.db.queries import QUERIES


class SessionLocks:
    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: psycopg.AsyncConnection[Any] | None = None

    @property
    def alive(self) -> bool:
        return self._conn is not None and not self._conn.closed

    async def try_queue_lock(self, repo: str) -> bool:
        """Take the leadership of ``repo``'s merge queue if nobody holds it (``queue_lock_try``); True once held."""
        with translated():
            if not self.alive:
                self._conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            assert self._conn is not None
            cur = await self._conn.execute(QUERIES["queue_lock_try"], {"repo": repo})
            row = await cur.fetchone()
        return bool(row and row[0])

    async def held(self) -> int:
        """How many queue locks this connection still holds (``queue_locks_held``); 0 when it is gone. ``alive`` alone
        never finds that out: a connection the server ended reads as open until a query on it fails."""
        if not self.alive:
            return 0
        assert self._conn is not None
        try:
            cur = await self._conn.execute(QUERIES["queue_locks_held"])
            row = await cur.fetchone()
        except psycopg.Error:  # the server ended it: its locks are gone, another replica may hold them
            await self.close()
            return 0
        return int(row[0]) if row else 0

    async def close(self) -> None:
        """Let go of every lock (closing the connection releases them)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
