"""The queue page's live updates: a server-sent event stream that speaks when the queue changes.

Rules:
  * A stream polls one cheap fingerprint query (``page_queue_fingerprint``: index-backed counts and maxima)
    and sends an event only when the fingerprint changes; the page then fetches the fresh fragment. Streams
    share the fingerprint: it is read at most once per ``POLL_SECONDS`` per process, however many streams are
    open, so the database load does not grow with viewers.
  * At most ``MAX_STREAMS`` streams per process; more get 503, or a "busy" event if they raced past that check
    (the page then falls back to fetching the fragment every few seconds).
  * A stream ends when the client goes away (Starlette cancels it), when its token is revoked (checked every
    ``REAUTH_SECONDS``), after ``MAX_STREAM_SECONDS`` (the browser reconnects by itself), and as soon as the
    server is asked to stop. That last one matters: uvicorn waits for open responses to finish before it shuts
    the application down, so an endless stream would hold a SIGTERM forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable

from mergebot.errors import MergebotError
from mergebot.web.present import event_data

POLL_SECONDS = 0.5
REAUTH_SECONDS = 5.0
KEEPALIVE_SECONDS = 15.0
MAX_STREAM_SECONDS = 300.0
MAX_STREAMS = 32


def server_exiting() -> bool:
    """Whether uvicorn was asked to stop (SIGTERM or SIGINT). Its signal handler is a bound method of its
    ``Server``; we only read that server's ``should_exit`` flag. Under other servers this is False and streams
    end by ``MAX_STREAM_SECONDS``."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        owner = getattr(signal.getsignal(sig), "__self__", None)
        if getattr(owner, "should_exit", False) is True:
            return True
    return False


class LiveQueue:
    """Per-process state of the live streams: how many are open and the last fingerprint read."""

    def __init__(self, max_streams: int = MAX_STREAMS, poll_seconds: float = POLL_SECONDS) -> None:
        self.max_streams = max_streams
        self.poll_seconds = poll_seconds
        self.open = 0
        self._fingerprint = ""
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()

    @property
    def full(self) -> bool:
        return self.open >= self.max_streams

    def try_open(self) -> bool:
        if self.open >= self.max_streams:
            return False
        self.open += 1
        return True

    def close(self) -> None:
        self.open = max(0, self.open - 1)

    async def fingerprint(self, read: Callable[[], Awaitable[str]]) -> str:
        """The queue's fingerprint, read at most once per poll interval whoever asks."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            if loop.time() - self._read_at >= self.poll_seconds:
                self._fingerprint = await read()
                self._read_at = loop.time()
            return self._fingerprint


async def stream(live: LiveQueue, read: Callable[[], Awaitable[str]], still_allowed: Callable[[], Awaitable[bool]],
                 *, exiting: Callable[[], bool] = server_exiting,
                 max_seconds: float = MAX_STREAM_SECONDS) -> AsyncIterator[str]:
    """The event stream of one viewer. It takes its slot when it starts and gives it back however it ends (a
    slot taken before the response started would leak if the client left before the first chunk)."""
    if not live.try_open():
        yield "retry: 10000\nevent: busy\ndata: too many live pages are open\n\n"
        return
    loop = asyncio.get_running_loop()
    started = checked = spoke = loop.time()
    last = None
    try:
        yield "retry: 2000\n\n"
        while not exiting() and loop.time() - started < max_seconds:
            now = loop.time()
            if now - checked >= REAUTH_SECONDS:
                checked = now
                if not await still_allowed():
                    yield "event: logout\ndata: the session ended\n\n"
                    return
            with contextlib.suppress(MergebotError):  # a database hiccup: say nothing, try again next tick
                fp = await live.fingerprint(read)
                if fp != last:
                    last, spoke = fp, now
                    yield event_data(fp)
            if now - spoke >= KEEPALIVE_SECONDS:
                spoke = now
                yield ": keep-alive\n\n"
            await asyncio.sleep(live.poll_seconds)
    finally:
        live.close()
