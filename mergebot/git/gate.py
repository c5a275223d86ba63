"""How many git processes the HTTP endpoint runs at once, and who goes next: pushes (and the verifiers' fetches)
before the agents' fetches.

A fleet starting together sends a hundred fetches and then a hundred pushes at the same moment. Run all at once,
they share the CPU evenly and every one of them finishes late: the first push reached the queue only after
nearly all of them had been served. With a bounded number running and the rest waiting in order, the first
requests finish first. Pushes go ahead of fetches because a push is finished work waiting to be verified,
while a fetch starts new work; a remote verifier's fetch goes ahead too, because the queue waits on its run.
Within each class the order is first come, first served. Between the classes, "ahead" is a head start of
``patience`` seconds (10 by default), not an absolute rank: a waiting push goes before every fetch that arrived
less than 10 s before it, but a fetch that arrived earlier than that goes first. So a fleet's burst of pushes is
served before its fetches, and neither a stream of pushes nor a backlog of fetches can hold the other side until
the queue timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import AsyncIterator

from mergebot import messages as say


def default_limit() -> int:
    return max(4, 2 * (os.cpu_count() or 1))


class Busy(Exception):
    """A request waited longer than it may for a free slot."""


class Gate:
    def __init__(self, limit: int, *, patience: float = 10.0) -> None:
        if limit < 1:
            raise ValueError("a gate needs at least one slot")
        self.limit = limit
        self.patience = patience
        self.running = 0
        # per class, the waiters with the loop time each began to wait
        self._waiting: dict[bool, deque[tuple[asyncio.Future[None], float]]] = {True: deque(), False: deque()}

    @property
    def waiting(self) -> int:
        return sum(1 for q in self._waiting.values() for f, _ in q if not f.done())

    @contextlib.asynccontextmanager
    async def slot(self, *, ahead: bool, timeout: float) -> AsyncIterator[None]:
        """Hold one slot for the body of the ``async with``; ``ahead`` waiters are served before the others.
        Raises ``Busy`` after ``timeout`` s of waiting."""
        if self.running < self.limit and not self.waiting:
            self.running += 1
        else:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            entry = (fut, loop.time())
            self._waiting[ahead].append(entry)
            try:
                async with asyncio.timeout(timeout):
                    await fut
            except BaseException as e:
                if fut.done() and not fut.cancelled():
                    self._release()  # the slot was handed over just as the wait ended: pass it on
                else:
                    fut.cancel()
                    with contextlib.suppress(ValueError):
                        self._waiting[ahead].remove(entry)
                if isinstance(e, TimeoutError):
                    raise Busy(say.no_git_slot(timeout, self.limit)) from None
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        """Hand the slot to the waiter that has waited longest, counting an "ahead" waiter's head start."""
        for q in self._waiting.values():
            while q and q[0][0].done():  # cancelled or timed out: no longer waiting
                q.popleft()
        ahead, behind = self._waiting[True], self._waiting[False]
        if ahead or behind:
            pick = ahead if ahead and (not behind or ahead[0][1] - self.patience <= behind[0][1]) else behind
            fut, _ = pick.popleft()
            fut.set_result(None)  # the slot goes straight to the next waiter: running is unchanged
            return
        self.running -= 1
