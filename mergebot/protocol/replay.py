"""A finished run's events held to the model (``mergebot.protocol.trace``), read from its database."""

from __future__ import annotations

from mergebot.db.database import Database
from mergebot.protocol.trace import Verdict, trace


async def replay(db: Database) -> Verdict:
    """Every event of the run in ``db``, in order, held to the model (``trace``); the first the model does not
    allow stops it. Read once the run is over (its servers stopped or idle): the end is checked too (no intent
    pending)."""
    events = [e async for e in db.trace.events()]
    return trace(events, await db.trace.deps(), await db.trace.pending_intents())
