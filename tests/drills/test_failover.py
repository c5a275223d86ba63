"""The primary killed mid-landing and its synchronous standby promoted (Debian's PostgreSQL 15, ``tests/standby.py``).

``mergebot serve`` runs on a libpq multi-host URL (``target_session_attrs=read-write``) under agents streaming
pushes. At one landing step (after the intent, after main's compare-and-swap, after the landed row) the test
holds ``serve`` still (``MERGEBOT_PAUSE_AT``), SIGKILLs the primary, promotes the standby (clearing the
``synchronous_standby_names`` it inherited) and lets ``serve`` go on. Without a restart by hand, every subtask
lands exactly once, no candidate lands twice, and the drill invariants hold on the promoted server: nothing an
agent was told is missing, because every commit waited for the standby.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.drills.conftest import drill_seed, make_rig, open_store
from tests.support.pg import PG15_BIN, available_servers
from tests.support.pooler import need
from tests.support.standby import Pair


@pytest.fixture
def pair() -> Iterator[Pair]:
    need("Debian's PostgreSQL 15 (postgresql-15)", "pg15" in available_servers() and (PG15_BIN / "initdb").exists())
    p = Pair()
    try:
        yield p
    finally:
        p.stop()


@pytest.mark.parametrize("step", [
    "after_cas",
    pytest.param("after_intent", marks=pytest.mark.long_drill),
    pytest.param("after_commit", marks=pytest.mark.long_drill),
])
async def test_the_primary_killed_mid_landing_and_the_standby_promoted_loses_nothing(
        pair: Pair, tmp_path: Path, step: str) -> None:
    url = pair.create_db("mb_failover")
    db = await open_store(url, tmp_path / "data")
    flag = tmp_path / "hold"
    rig = await make_rig(db, url, tmp_path, MERGEBOT_PAUSE_AT=f"{step}:{flag}")
    try:
        drill = rig.drill(drill_seed())
        until = time.monotonic() + 150
        agents = drill.agents(3, until=until)
        ids = drill.subtasks(6, "failover stream", until=until)
        result, threads = drill.stream(agents, until=until)
        while len(await db.landing.landed(repo="demo")) < 2:
            assert time.monotonic() < until, rig.bot.log.read_text()[-3000:]
            time.sleep(0.1)
        flag.touch()  # the next landing to reach the step holds there
        while not Path(f"{flag}.reached").exists():
            assert time.monotonic() < until, "no landing reached " + step + "\n" + rig.bot.log.read_text()[-3000:]
            time.sleep(0.05)
        before = len(await db.landing.landed(repo="demo"))  # the held landing counts once its row is written
        pair.kill_primary()
        killed = time.monotonic()
        pair.promote()
        flag.unlink()  # serve goes on, on a server that is gone
        await db.pool.close()
        db = rig.db = await open_store(url, tmp_path / "data")  # the test's own store reconnects the same way
        while len(await db.landing.landed(repo="demo")) <= before:
            assert time.monotonic() < until, rig.bot.log.read_text()[-3000:]
            time.sleep(0.1)
        print(f"killed at {step}: the first landing after it came {time.monotonic() - killed:.1f} s later")
        for th in threads:
            th.join(max(1.0, until - time.monotonic()))
        assert result.errors == []
        await rig.wait_settled(ids, timeout=90)
        assert rig.bot.proc is not None and rig.bot.proc.poll() is None  # never restarted by hand
        landed = [r for r in await db.landing.landed(repo="demo", limit=100) if r.kind == "land"]
        assert sorted(r.subtask_id for r in landed) == sorted(ids)  # each exactly once
        cands = await db.landing.candidates(repo="demo", limit=1000)
        assert sorted(c["subtask_id"] for c in cands if c["status"] == "landed") == sorted(ids)
        assert await db.landing.pending_intents("demo") == []
        assert rig.violations(result.pushes) == []
        assert pair.query("standby", "SELECT pg_is_in_recovery()") == [(False,)]  # it was the promoted one
    finally:
        rig.bot.stop()
        await rig.db.pool.close()


async def test_commits_held_by_a_lost_standby_are_reported_not_hung_on(pair: Pair, tmp_path: Path) -> None:
    """The synchronous standby dies: every commit on the primary waits for it. ``/healthz`` answers at once with
    503 and what to do, the queue page says so too, and the held write completes once the standby is back."""
    url = pair.create_db("mb_stall")
    db = await open_store(url, tmp_path / "data")
    rig = await make_rig(db, url, tmp_path)
    web = httpx.Client(base_url=rig.bot.url, timeout=10)
    try:
        assert web.post("/login", data={"token": rig.admin, "next": "/ui/queue"},
                        headers={"Origin": rig.bot.url}).status_code == 303
        pair.kill("standby")
        held: dict[str, Any] = {}

        def write() -> None:
            held["r"] = rig.client().post("/api/v1/subtasks", {"title": "written while the standby is gone"})

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        deadline = time.monotonic() + 30
        while (health := httpx.get(f"{rig.bot.url}/healthz", timeout=10)).status_code == 200:
            assert time.monotonic() < deadline, "healthz never said the commits wait"
            time.sleep(0.2)
        body = health.json()
        assert health.status_code == 503 and body["database"] == "commits_waiting", body
        assert body["waiting_commits"] >= 1 and "synchronous_standby_names" in body["message"], body
        assert writer.is_alive() and "r" not in held  # the write waits; the health check did not wait with it
        page = web.get("/ui/queue")
        assert page.status_code == 200 and 'id="commits-stalled"' in page.text, page.text[:2000]
        pair.start("standby")
        writer.join(60)
        assert not writer.is_alive() and held["r"]["created"] is True, held
        assert httpx.get(f"{rig.bot.url}/healthz", timeout=10).json() == {"ok": True, "database": "ok"}
    finally:
        web.close()
        rig.bot.stop()
        await rig.db.pool.close()
