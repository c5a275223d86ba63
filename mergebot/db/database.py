"""The database as the rest of Mergebot sees it: one pool, one waiter, and small stores composed on them.

``Database`` holds ``.agents`` (tokens, groups), ``.subtasks`` (claims, fenced writes, notes, events), ``.repos``
(repositories: their rules, held-out checks, pause and red main), ``.landing`` (candidates, intents, landed rows,
main's status), ``.jobs`` (verify jobs), ``.forge`` (links, deliveries, the status outbox), ``.reverts`` (a red
main's mending), ``.pages`` and ``.views`` (read models), and ``.waiter`` (every wait for a row to change). No store
knows another; what spans two tables of two stores is one store's transaction.
``open_database`` resolves the server, migrates it and opens the pool (the CLI's local commands, the demo, tests);
``mergebot serve`` builds one on the request-handling role's pool.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from psycopg_pool import AsyncConnectionPool

from mergebot.db.admission import AdmissionStore
from mergebot.db.agents import AgentStore
from mergebot.db.attest import AttestStore
from mergebot.db.base import Sql
from mergebot.db.connect import direct_url, open_pool, prepare
from mergebot.db.forge import ForgeStore
from mergebot.db.jobs import JobStore
from mergebot.db.landing import LandingStore
from mergebot.db.pages import PageStore
from mergebot.db.repos import RepoStore
from mergebot.db.reverts import RevertStore
from mergebot.db.subtasks import SubtaskStore
from mergebot.db.trace import TraceStore
from mergebot.db.views import ViewStore
from mergebot.db.waiter import Waiter
from mergebot.settings import Settings


class Database:
    def __init__(self, pool: AsyncConnectionPool[Any], *, lease_seconds: float = 120.0,
                 job_lease_seconds: float = 30.0, listen_url: str | None = None, duplicate_days: int = 30) -> None:
        self.pool = pool
        self.sql = Sql(pool)
        # the server itself, for the sessions a transaction pooler cannot keep: LISTEN, the queue's leadership
        self._direct = listen_url or self.sql.url
        self.waiter = Waiter(self._direct)
        self.agents = AgentStore(self.sql)
        self.subtasks = SubtaskStore(self.sql, self.waiter, lease_seconds=lease_seconds,
                                     duplicate_days=duplicate_days)
        self.repos = RepoStore(self.sql)
        self.landing = LandingStore(self.sql, self.waiter, lease_seconds=lease_seconds)
        self.jobs = JobStore(self.sql, self.waiter, lease_seconds=job_lease_seconds)
        self.forge = ForgeStore(self.sql)
        self.reverts = RevertStore(self.sql)
        self.pages = PageStore(self.sql)
        self.views = ViewStore(self.sql)
        self.attest = AttestStore(self.sql)
        self.admission = AdmissionStore(self.sql)
        self.trace = TraceStore(self.sql)

    @property
    def url(self) -> str:
        """Where the few connections that must not come from the pool go: a session of their own on the server
        itself (the direct URL when the pool goes through a transaction pooler)."""
        return self._direct

    async def commits_waiting(self) -> tuple[int, float]:
        """How many of this database's commits wait for a synchronous standby, and the oldest's seconds."""
        row = await self.sql.one("commits_waiting")
        return (int(row["n"]), float(row["longest_s"])) if row else (0, 0.0)

    async def close(self) -> None:
        """Stop the waiter and close the pool."""
        await self.waiter.stop()
        await self.pool.close()

    @classmethod
    async def connect(cls, url: str, settings: Settings, *, statement_timeout_ms: int | None = None,
                      max_size: int | None = None) -> Database:
        """A database on a new pool to ``url`` (already migrated), with the settings' leases."""
        pool = await open_pool(url, settings, statement_timeout_ms=statement_timeout_ms, max_size=max_size)
        return cls(pool, lease_seconds=settings.lease_seconds, job_lease_seconds=settings.job_lease_seconds,
                   duplicate_days=settings.duplicate_days, listen_url=direct_url(settings, url))


@contextlib.asynccontextmanager
async def open_database(settings: Settings, *, max_size: int | None = 2) -> AsyncIterator[Database]:
    """The settings' database (embedded unless MERGEBOT_DATABASE_URL), migrated, on a small pool of its own."""
    url = await asyncio.to_thread(prepare, settings)
    db = await Database.connect(url, settings, max_size=max_size)
    try:
        yield db
    finally:
        await db.close()
