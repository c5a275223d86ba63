"""The primary killed mid-landing and its synchronous standby promoted (Debian's PostgreSQL 15, ``tests/standby.py``).

``mergebot serve`` runs on a libpq multi-host URL (``target_session_attrs=read-write``) under agents streaming
pushes. At one landing step (after the intent, after main's compare-and-swap, after the landed row) the test
holds ``serve`` still (``MERGEBOT_PAUSE_AT``), SIGKILLs the primary, promotes the standby (clearing the
``synchronous_standby_names`` it inherited) and lets ``serve`` go on. Without a restart by hand, every subtask
lands exactly once, no candidate lands twice, and the drill invariants hold on the promoted server: nothing an
agent was told is missing, because every commit waited for the standby.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mergebot.db.connect import open_pool
from mergebot.db.database import Database
from mergebot.settings import Settings
from tests.drills.conftest import drill_seed, make_rig
from tests.pg import PG15_BIN, available_servers
from tests.pooler import need
from tests.standby import Pair


@pytest.fixture
def pair() -> Iterator[Pair]:
    need("Debian's PostgreSQL 15 (postgresql-15)", "pg15" in available_servers() and (PG15_BIN / "initdb").exists())
    p = Pair()
    try:
        yield p
    finally:
        p.stop()


async def open_store(url: str, data: Path) -> Database:
    pool = await open_pool(url, Settings(database_url=url, data_dir=data), statement_timeout_ms=5000)
    return Database(pool, lease_seconds=60)


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
