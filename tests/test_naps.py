"""``mergebot.naps.nap``: the server's loops sleep with it, and a cancel that comes with the wake-up is never lost."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable

import pytest

from mergebot.naps import nap


async def test_a_nap_ends_when_woken_or_at_its_limit() -> None:
    ev = asyncio.Event()
    assert await nap(ev, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, ev.set)
    assert await nap(ev, 5) is True


async def _cancelled_with_its_wake_up(sleep: Callable[[asyncio.Event], Awaitable[object]]) -> bool:
    """A loop that sleeps with ``sleep`` until woken, woken and cancelled in the same turn: whether it stopped."""
    ev = asyncio.Event()

    async def loop() -> None:
        while True:
            await sleep(ev)
            ev.clear()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.01)  # it sleeps
    ev.set()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), 0.2)
    stopped = task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return stopped


async def test_a_cancel_that_comes_with_the_wake_up_stops_the_loop() -> None:
    assert await _cancelled_with_its_wake_up(lambda ev: nap(ev, 10))


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps a cancel from Python 3.12 on")
async def test_the_wait_for_it_replaces_loses_that_cancel_on_this_python() -> None:
    async def old(ev: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), timeout=10)

    assert not await _cancelled_with_its_wake_up(old)  # why the server's loops no longer use it
