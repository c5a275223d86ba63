"""The merge queue and the in-process verifier workers on a thread of their own: their own event loop, their own
database pool and waiter, so no flood of requests stands between a finished run and the landing it decides.

Why: in one event loop every await of a landing step queued behind the callbacks of every request ready at that
moment. At a thousand agents the server's loop was saturated by claims, heartbeats and pushes, and the queue's
steps crawled: a pushed candidate waited a median of 37 s for its landing, the verifiers sat idle
three fifths of the time while work waited. On a thread of its own the queue gets the interpreter every few
milliseconds whatever the requests do (one sitting, 1,000 agents offering ten times the verifiers' capacity:
push -> landed p50 37 s -> 3-9 s, the verifiers busy 0.41 -> 0.57-0.64 while work waited, 635 -> 688-722 landed
in 480 s).

Request handling reaches the queue only through this class, never its objects (their pool and tasks belong to the
other loop): ``poke`` (thread-safe), ``window`` (an integer read), ``reconcile_now`` and ``on_loop`` (a coroutine
run on the queue's loop with its context, awaited from the caller's), and ``close``. ``LandingQueue`` has the same,
for a server whose queue does not run (``run_queue=False``: the tests' in-process apps).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from mergebot.db.database import Database
from mergebot.landing.main.reconcile import Report
from mergebot.landing.window.queue import LandingQueue
from mergebot.naps import cancel_all
from mergebot.verify.worker import Worker

T = TypeVar("T")
Parts = tuple[Database, LandingQueue, list[Worker]]
JOIN_SECONDS = 30.0  # how long ``close`` waits for the thread to end


class LandingThread:
    def __init__(self, build: Callable[[], Awaitable[Parts]]) -> None:
        self._build = build  # the queue's database, the queue and the workers, made on the thread's own loop
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: LandingQueue | None = None
        self._stop: asyncio.Event | None = None

    async def start(self) -> None:
        """Start the thread and wait until its queue and workers run (what building them raised, raised here)."""
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="mergebot-queue", daemon=True)
        self._thread.start()
        await asyncio.wrap_future(ready)

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main(loop, ready))
        finally:
            loop.close()

    async def _main(self, loop: asyncio.AbstractEventLoop, ready: concurrent.futures.Future[None]) -> None:
        try:
            db, queue, workers = await self._build()
        except BaseException as e:  # the starting server raises it
            ready.set_exception(e)
            return
        self._loop, self._queue, self._stop = loop, queue, asyncio.Event()
        tasks = [asyncio.create_task(queue.run(), name="mergebot-queue"),
                 *(asyncio.create_task(w.run(), name=f"mergebot-verifier-{i}") for i, w in enumerate(workers))]
        ready.set_result(None)
        try:
            await self._stop.wait()
        finally:
            await cancel_all(tasks)
            await queue.close()
            await db.close()

    @property
    def queue(self) -> LandingQueue:
        assert self._queue is not None, "the landing thread has not started"
        return self._queue

    @property
    def window(self) -> int:
        return self.queue.window

    def poke(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.queue.poke)

    async def on_loop(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``fn(ctx, *args)`` run on the queue's loop (its database, its tasks), awaited from this one."""
        return await self._there(self.queue.on_loop(fn, *args))

    async def reconcile_now(self) -> list[Report]:
        return await self._there(self.queue.reconcile_now())

    async def _there(self, work: Coroutine[Any, Any, T]) -> T:
        """``work`` run on the queue's loop, awaited from this one."""
        assert self._loop is not None, "the landing thread has not started"
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._loop))

    async def close(self) -> None:
        """Stop the queue and the workers, close their database, and wait for the thread to end."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, JOIN_SECONDS)
