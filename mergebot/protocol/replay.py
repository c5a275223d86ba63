"""A finished run's events held to the model (``mergebot.protocol.trace``), read from its database."""

from __future__ import annotations

from mergebot.db.database import Database
from mergebot.protocol.trace import Tracer, Verdict


async def replay(db: Database) -> Verdict:
    """Every event of the run in ``db``, in order, held to the model; the first the model does not allow stops it.
    Read once the run is over (its servers stopped or idle): the end is checked too (no intent pending)."""
    tracer = Tracer(await db.trace.deps())
    async for e in db.trace.events():
        if tracer.feed(e) is not None:
            return tracer.verdict
    tracer.end(await db.trace.pending_intents())
    return tracer.verdict
