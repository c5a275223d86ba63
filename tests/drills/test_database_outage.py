"""PostgreSQL stopped and restarted under a stream of pushes. While it is down the bot refuses work clearly and
quickly (503 ``unavailable`` from the API, a refused push that says why, ``/healthz`` 503), never a hang or a 500;
once it is back the bot reconnects by itself (no restart, no manual step) and every subtask lands with the books
balanced. The server is the drills' own (tests/drills/pgctl.py), stopped and started with pg_ctl."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from mergebot.client import ApiError, Client
from mergebot.drill.wire import _git, commit_file, push_head
from tests.drills.conftest import drill_seed, make_rig, open_store
from tests.drills.pgctl import StoppablePostgres

T = TypeVar("T")


@pytest.fixture
def pg() -> Iterator[StoppablePostgres]:
    server = StoppablePostgres()
    try:
        yield server
    finally:
        server.destroy()


def access_lines(log: Path) -> list[dict[str, object]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


async def test_database_stopped_and_restarted_mid_stream(pg: StoppablePostgres, tmp_path: Path) -> None:
    db = await open_store(pg.db_url, tmp_path / "data")
    # post-land checks run for every landing here (not reusing the landing's run), so some die in the outage
    rig = await make_rig(db, pg.db_url, tmp_path, MERGEBOT_ACCESS_LOG="1", MERGEBOT_POST_LAND_RERUN="1")
    try:
        drill = rig.drill(drill_seed())
        until = time.monotonic() + 150
        probe, *agents = drill.agents(4, until=until)
        probe_id = drill.subtasks(1, "probe", until=until)[0]
        probe_client = Client(rig.bot.url, probe.token, timeout=60)
        claim = probe_client.post("/api/v1/subtasks/claim")
        assert claim["handle"]["id"] == probe_id
        wt = drill.worktree(probe, until=until)
        _git(["checkout", "-q", "-B", f"subtasks/{probe_id}/v1", "origin/main"], wt)
        commit_file(wt, "probe.txt", "pushed while the database is down\n", "probe")
        ids = drill.subtasks(6, "outage stream", until=until)
        result, threads = drill.stream(agents, until=until)
        while len(await db.landing.landed(repo="demo")) < 2:
            assert time.monotonic() < until, rig.bot.log.read_text()[-3000:]
            time.sleep(0.2)

        pg.stop("fast")
        down_at = time.monotonic()

        # The three probes at once, each timed on its own: one after the other they kept the database down for
        # three of the pool's 10 s waits (30 s), where the stream needs a few seconds of outage (issue 42).
        def timed(probe: Callable[[], T]) -> tuple[T, float]:
            t = time.monotonic()
            return probe(), time.monotonic() - t

        def heartbeat() -> ApiError | None:
            try:
                probe_client.post(f"/api/v1/subtasks/{probe_id}/heartbeat", {"claim_version": 1})
            except ApiError as e:
                return e
            return None

        with ThreadPoolExecutor(3) as pool:
            healthz = pool.submit(timed, lambda: httpx.get(f"{rig.bot.url}/healthz", timeout=60))
            beat = pool.submit(timed, heartbeat)
            pushed = pool.submit(timed, lambda: push_head(wt, f"subtasks/{probe_id}/v1", timeout=60))
        health, took = healthz.result()
        assert (health.status_code, health.json()["database"]) == (503, "unreachable")
        assert took < 20  # bounded by the pool's 10 s wait, not a hang
        refused, took = beat.result()
        assert refused is not None, "a heartbeat was answered while the database was down"
        assert (refused.status, refused.code) == (503, "unavailable")
        assert "database" in refused.message and took < 20
        (outcome, said), took = pushed.result()
        assert outcome != "accepted" and took < 40, said
        assert "503" in said or "unavailable" in said or "unreachable" in said, said
        time.sleep(max(0.0, 5 - (time.monotonic() - down_at)))  # a few seconds of outage under the stream
        pg.start()
        back_at = time.monotonic()

        deadline = time.monotonic() + 30
        while httpx.get(f"{rig.bot.url}/healthz", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "the bot did not reconnect by itself"
            time.sleep(0.2)
        print(f"outage {back_at - down_at:.1f} s; healthy again {time.monotonic() - back_at:.1f} s after the restart")
        db = rig.db = await open_store(pg.db_url, tmp_path / "data")
        assert drill.push_until_answered(probe, wt, probe_id, 1, until=until).outcome == "accepted"
        for th in threads:
            th.join(max(1.0, until - time.monotonic()))
        assert result.errors == []
        await rig.wait_settled([*ids, probe_id])
        assert rig.violations(result.pushes) == []
        # every landing's post-land check is recorded, outage or not: one cut short by the outage runs again once
        # its job lease (30 s) lapses, so allow that and a run on a slow machine (a 30 s outage was seen in CI)
        deadline = time.monotonic() + 90
        while pending := [r.id for r in await db.landing.landed(repo="demo", limit=100) if r.main_status == "pending"]:
            assert time.monotonic() < deadline, f"post-land status still pending for landed rows {pending}"
            time.sleep(0.2)
        statuses = [d["status"] for d in access_lines(rig.bot.log) if d.get("logger") == "uvicorn.access"]
        assert 503 in statuses and not [s for s in statuses if isinstance(s, int) and s >= 500 and s != 503]
        assert "Traceback" not in rig.bot.log.read_text()
    finally:
        rig.bot.stop()
        await rig.db.pool.close()
