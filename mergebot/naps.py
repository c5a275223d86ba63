"""Waiting for an event with a limit, so that a cancel is never lost; and cancelling tasks until they have ended.

Every long-lived loop of the server (the queue, the workers, the status outbox, the database waiter) sleeps until
it is woken or a limit passes. ``asyncio.wait_for`` on Python 3.11 loses a cancel that arrives in the same turn as
the wake-up: it returns the event's result instead of raising, and a loop around it goes on waiting, so a shutdown
that cancels it hangs (a clean-clone CI run hung so in the lanes test). ``asyncio.timeout`` tells its own expiry
from a cancel from outside, and lets the latter through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def nap(event: asyncio.Event, seconds: float) -> bool:
    """Until ``event`` is set (True) or ``seconds`` pass (False); a cancel always propagates."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
        return True
    except TimeoutError:
        return False


async def nap_any(events: Iterable[asyncio.Event], seconds: float) -> bool:
    """Until one of ``events`` is set (True) or ``seconds`` pass (False); a cancel always propagates."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        async with asyncio.timeout(seconds):
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        return True
    except TimeoutError:
        return False
    finally:
        await cancel_all(waits)


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended; what they raised (their cancel too) is dropped."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
