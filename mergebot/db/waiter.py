"""Waiting for rows to change, with LISTEN/NOTIFY, losing nothing: the one listen-then-drain loop.

Three channels carry an id at the front of their payload: ``mergebot_finished`` (a subtask landed, failed or
was cancelled), ``mergebot_candidate`` (a candidate's status changed) and ``mergebot_job`` (a verify job
finished or was cancelled). The triggers that send them are in the migrations.

Rules:
  * One connection LISTENs on all three for the whole process (started by the first wait, or at start-up by
    ``mergebot serve``) and wakes every wait registered on the announced (channel, id).
  * A wait registers its keys *before* it reads the rows (listen, then drain), so a change that lands between
    the two is caught by one or the other; the rows are the truth, a notification only says "read again".
  * While the listening connection is down, waits poll (every ``POLL_WHILE_DOWN`` seconds) and the listener
    reconnects; when it is back, every wait reads again. A lost notification costs latency, never a result.
  * A wait may also ask to read again every ``poll`` seconds while the listener is up (the queue's waits on
    verify jobs do: a connection that looks alive but no longer hears, behind a pooler say, must not hold a
    landing for a whole check timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg

from mergebot.db.queries import QUERIES

log = logging.getLogger(__name__)

FINISHED = "mergebot_finished"
CANDIDATE = "mergebot_candidate"
JOB = "mergebot_job"
LISTEN = {FINISHED: "listen_finished", CANDIDATE: "listen_candidate", JOB: "listen_job"}  # the named queries
POLL_WHILE_DOWN = 1.0
RECONNECT_AFTER = 0.5

Key = tuple[str, int]


class Waiter:
    def __init__(self, url: str) -> None:
        self.url = url
        self._task: asyncio.Task[None] | None = None
        self._waiting: dict[Key, set[asyncio.Event]] = {}
        self._up = asyncio.Event()  # the listening connection is LISTENing now

    async def start(self, timeout: float = 30.0) -> None:
        """Start listening and wait until it does (``mergebot serve`` at start-up)."""
        self._ensure_listening()
        await asyncio.wait_for(self._up.wait(), timeout=timeout)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._up.clear()

    def _ensure_listening(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._task.get_loop() is loop:
            return
        if self._task is not None and self._task.get_loop() is not loop:  # a new event loop: start afresh
            self._up = asyncio.Event()
        self._task = loop.create_task(self._listen(), name="mergebot-waiter")

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    for query in LISTEN.values():
                        await conn.execute(QUERIES[query])
                    self._up.set()
                    self._wake_all()  # anything that changed while we were not listening: waits read again
                    async for note in conn.notifies():
                        with contextlib.suppress(ValueError):
                            key = (note.channel, int(note.payload.split(":", 1)[0]))
                            for ev in self._waiting.get(key, ()):
                                ev.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("the waiter's connection failed, reconnecting: %s", e)
            self._up.clear()
            self._wake_all()  # from now on the waits poll until the listener is back
            await asyncio.sleep(RECONNECT_AFTER)

    def _wake_all(self) -> None:
        for evs in self._waiting.values():
            for ev in evs:
                ev.set()

    async def until(self, channel: str, ids: Sequence[int], done: Callable[[], Awaitable[bool]],
                    timeout: float, *, poll: float | None = None) -> bool:
        """Until ``done()`` is true or ``timeout`` passes, reading again whenever one of ``ids`` is announced on
        ``channel`` (and at least every ``poll`` seconds, if given). Returns the last ``done()``. Every wait of the
        package is this one."""
        self._ensure_listening()
        keys = [(channel, i) for i in dict.fromkeys(ids)]
        ev = asyncio.Event()
        for key in keys:
            self._waiting.setdefault(key, set()).add(ev)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                ev.clear()
                if await done():  # drain, after registering
                    return True
                left = deadline - loop.time()
                if left <= 0:
                    return False
                nap = min(left, poll or left) if self._up.is_set() else min(left, POLL_WHILE_DOWN, poll or left)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ev.wait(), timeout=nap)
        finally:
            for key in keys:
                evs = self._waiting.get(key)
                if evs is not None:
                    evs.discard(ev)
                    if not evs:
                        del self._waiting[key]


async def read_until(waiter: Waiter, channel: str, ids: Sequence[int], read: Callable[[], Awaitable[Any]],
                     finished: Callable[[Any], bool], timeout: float, *, poll: float | None = None) -> Any:
    """``Waiter.until`` for a wait that returns what it read last: ``read()`` until ``finished`` holds for it."""
    seen: list[Any] = []

    async def done() -> bool:
        seen[:] = [await read()]
        return finished(seen[0])

    await waiter.until(channel, ids, done, timeout, poll=poll)
    return seen[0]
