"""The live queue stream of the pages: on a real server it speaks when the queue changes and ends on shutdown;
directly (``mergebot.web.live``), streams are bounded, share their reads, end when the server stops, and end for a
viewer whose token was revoked.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.rules import Rules
from mergebot.web import live
from tests.support.bot import BotProcess
from tests.support.site import SHA


async def _events(resp: httpx.Response, out: list[str]) -> None:
    async for line in resp.aiter_lines():
        out.append(line)


async def test_live_stream_speaks_on_change_and_ends_on_shutdown(e2e_db: Database, e2e_db_url: str,
                                                                 tmp_path: Path) -> None:
    _, token = await e2e_db.agents.add_agent(name="rita", role=Role.REVIEWER)
    await e2e_db.repos.create_repo(name="app", root_sha=SHA, rules=Rules.of(target_branch="main",
                                   verifier_command="true", verifier_timeout_s=60, protected_paths=[],
                                   max_push_bytes=1 << 20, max_file_bytes=1 << 20))
    await e2e_db.repos.set_paused(repo="app", paused=True, reason="held for the test")
    bot = BotProcess(e2e_db_url, tmp_path / "data").start()
    try:
        async with httpx.AsyncClient(base_url=bot.url, timeout=10) as client:
            r = await client.post("/login", data={"token": token}, headers={"Origin": bot.url})
            assert r.status_code == 303
            lines: list[str] = []
            async with client.stream("GET", "/ui/queue/events") as resp:
                assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
                reader = asyncio.create_task(_events(resp, lines))
                await _until(lambda: sum(line == "event: queue" for line in lines) == 1)
                await e2e_db.repos.set_paused(repo="app", paused=False, reason=None)
                await _until(lambda: sum(line == "event: queue" for line in lines) == 2)
                data = [line for line in lines if line.startswith("data: ")]
                assert len(data) == 2 and data[0] != data[1]
                started = time.monotonic()
                await asyncio.to_thread(bot.stop)
                assert bot.proc is not None and bot.proc.returncode == 0
                assert time.monotonic() - started < 5, "an open stream held the shutdown"
                await asyncio.wait_for(reader, 5)
    finally:
        bot.stop()


async def _until(pred: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_live_streams_are_bounded_share_reads_and_end() -> None:
    hub = live.LiveQueue(max_streams=2, poll_seconds=0.05)
    reads = 0

    async def read() -> str:
        nonlocal reads
        reads += 1
        return f"fp{reads // 3}"

    await asyncio.gather(*(hub.fingerprint(read) for _ in range(10)))
    assert reads == 1  # ten streams asking at once read once

    allowed = True

    async def still_allowed() -> bool:
        return allowed

    stop = False
    first = live.stream(hub, read, still_allowed, exiting=lambda: stop)
    got = [await first.__anext__(), await first.__anext__()]
    assert got[0].startswith("retry:") and got[1].startswith("event: queue") and hub.open == 1
    second = live.stream(hub, read, still_allowed, exiting=lambda: stop)
    assert (await second.__anext__()).startswith("retry: 2000") and hub.open == 2 and hub.full
    third = [chunk async for chunk in live.stream(hub, read, still_allowed)]
    assert len(third) == 1 and "event: busy" in third[0] and hub.open == 2  # over the bound: told, not counted
    await second.aclose()  # a client that went away gives its slot back
    assert hub.open == 1 and not hub.full
    stop = True
    rest = [chunk async for chunk in first]  # the server is stopping: the stream ends
    assert all("event: logout" not in c for c in rest) and hub.open == 0
    assert not live.server_exiting()  # pytest is not uvicorn
    never_started = live.stream(hub, read, still_allowed)
    del never_started
    assert hub.open == 0  # a stream that never ran took no slot


async def test_a_revoked_viewer_s_stream_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    hub = live.LiveQueue(poll_seconds=0.01)

    async def read() -> str:
        return "same"

    async def revoked() -> bool:
        return False

    monkeypatch.setattr(live, "REAUTH_SECONDS", 0.0)
    chunks = [c async for c in live.stream(hub, read, revoked, exiting=lambda: False, max_seconds=5)]
    assert chunks[-1].startswith("event: logout") and hub.open == 0
