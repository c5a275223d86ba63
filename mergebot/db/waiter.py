"""Waiting for rows to change, with LISTEN/NOTIFY, losing nothing: the one listen-then-drain loop.

Five channels carry an id at the front of their payload: ``mergebot_finished`` (a subtask landed, failed or
was cancelled), ``mergebot_candidate`` (a candidate's status changed), ``mergebot_job`` (a verify job finished
or was cancelled), ``mergebot_ready`` (a subtask became ready) and ``mergebot_push`` (a candidate of the subtask
whose id it carries was made or changed status: the waits keyed on a subtask's commit). The triggers that send
them are in the migrations.

Rules:
  * One connection LISTENs on all five for each ``Database`` (started by the first wait, or at start-up by
    ``mergebot serve``, which has two: request handling's and the landing thread's) and wakes every wait
    registered on the announced (channel, id).
  * A wait registers its keys *before* it reads the rows (listen, then drain), so a change that lands between
    the two is caught by one or the other; the rows are the truth, a notification only says "read again".
  * While the listening connection is down, waits poll (every ``POLL_WHILE_DOWN`` seconds) and the listener
    reconnects; when it is back, every wait reads again. A lost notification costs latency, never a result.
  * Waiting for work (``until_any``: any id on a channel, the idle agents' claims) wakes one waiter per
    notification, not all of them: a thousand idle agents do not all run a claim for one ready subtask. A waiter
    woken for nothing (the subtask went to someone else, or its group keeps this agent out) passes the wake-up to
    the next waiter that has not tried it yet, and a notification that finds every waiter busy is kept for the
    next one to come back.
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

from mergebot import naps
from mergebot.db.queries import QUERIES

log = logging.getLogger(__name__)

FINISHED = "mergebot_finished"
CANDIDATE = "mergebot_candidate"
JOB = "mergebot_job"
READY = "mergebot_ready"
PUSH = "mergebot_push"
LISTEN = {FINISHED: "listen_finished", CANDIDATE: "listen_candidate", JOB: "listen_job",
          READY: "listen_ready", PUSH: "listen_push"}  # the named queries
POLL_WHILE_DOWN = 1.0
RECONNECT_AFTER = 0.5

Key = tuple[str, int]


class _AnyWait:
    """One waiter for any id on a channel; ``tried``: the newest notification it has been woken for."""

    def __init__(self) -> None:
        self.ev = asyncio.Event()
        self.tried = 0


class Waiter:
    def __init__(self, url: str) -> None:
        self.url = url
        self._task: asyncio.Task[None] | None = None
        self._waiting: dict[Key, set[asyncio.Event]] = {}
        self._any: dict[str, list[_AnyWait]] = {}  # per channel, oldest first
        self._notes: dict[str, int] = {}  # per channel: notifications seen (a generation counter)
        self._unserved: dict[str, int] = {}  # per channel: notifications that found every waiter busy
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
                            if note.channel in self._any:
                                self._notes[note.channel] = self._notes.get(note.channel, 0) + 1
                                if not self._wake_one(note.channel):
                                    self._unserved[note.channel] = self._unserved.get(note.channel, 0) + 1
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
        for waits in self._any.values():
            for w in waits:
                w.ev.set()

    def _wake_one(self, channel: str) -> bool:
        """Wake the oldest idle waiter that has not tried the channel's newest notification; False if none."""
        newest = self._notes.get(channel, 0)
        for w in self._any.get(channel, ()):
            if w.tried < newest and not w.ev.is_set():
                w.tried = newest
                w.ev.set()
                return True
        return False

    async def until_any(self, channel: str, done: Callable[[], Awaitable[bool]], timeout: float) -> bool:
        """Until ``done()`` is true or ``timeout`` passes, trying again when this waiter's turn for a notification
        on ``channel`` comes (one waiter per notification). Returns the last ``done()``."""
        self._ensure_listening()
        me = _AnyWait()
        me.tried = self._notes.get(channel, 0)
        waits = self._any.setdefault(channel, [])
        waits.append(me)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                woken = me.ev.is_set()
                me.ev.clear()
                if await done():  # drain, after registering
                    return True
                if woken:  # woken for nothing: the next waiter's turn
                    self._wake_one(channel)
                if self._unserved.get(channel, 0) > 0:  # a notification came while everyone was busy
                    self._unserved[channel] -= 1
                    me.ev.set()
                    continue
                left = deadline - loop.time()
                if left <= 0:
                    return False
                nap = left if self._up.is_set() else min(left, POLL_WHILE_DOWN)
                await naps.nap(me.ev, nap)
        finally:
            waits.remove(me)

    async def until(self, channel: str, ids: Sequence[int], done: Callable[[], Awaitable[bool]],
                    timeout: float, *, poll: float | None = None, stop: asyncio.Event | None = None) -> bool:
        """Until ``done()`` is true or ``timeout`` passes, reading again whenever one of ``ids`` is announced on
        ``channel`` (and at least every ``poll`` seconds, if given). Returns the last ``done()``. ``stop``: the wait
        also ends once it is set, looked at between reads (a read is never cut off in the middle of its query).
        Every wait of the package is this one."""
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
                if left <= 0 or (stop is not None and stop.is_set()):
                    return False
                nap = min(left, poll or left) if self._up.is_set() else min(left, POLL_WHILE_DOWN, poll or left)
                await naps.nap_any([ev] if stop is None else [ev, stop], nap)
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
