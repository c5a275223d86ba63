"""A finished run's record as the protocol's trace checker reads it (``mergebot.protocol.replay``): the events in
order, each subtask's dependencies, the landing intents still pending."""

from __future__ import annotations

from collections.abc import AsyncIterator

from mergebot.db.base import Row, Sql


class TraceStore:
    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    async def events(self, *, page: int = 5000) -> AsyncIterator[Row]:
        """Every event, oldest first, read a page at a time."""
        after = 0
        while rows := await self.sql.all("trace_events", after=after, limit=page):
            for row in rows:
                yield row
            after = int(rows[-1]["id"])

    async def deps(self) -> dict[int, list[int]]:
        return {int(r["subtask_id"]): [int(d) for d in r["depends_on"]] for r in await self.sql.all("trace_deps")}

    async def pending_intents(self) -> list[int]:
        return [int(r["id"]) for r in await self.sql.all("trace_pending_intents")]
