"""Through a real PgBouncer in transaction mode (Debian's 1.18) in front of Debian's PostgreSQL 15: a real
``mergebot serve`` on ``MERGEBOT_DATABASE_URL`` = the pooler and ``MERGEBOT_DATABASE_DIRECT_URL`` = the server.

The landing path (push, verify, land, the dependent released), the claim race and a held claim all work through
it; the queue's leadership lock and LISTEN sit on sessions of their own on the server, never on a connection the
pooler hands around; the app role's grants still hold through the pooler and its statement timeout is its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mergebot.auth import Role
from mergebot.client import Client
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.conftest import fresh_database
from tests.support.bot import BotProcess, Fleet, check_command, commit, git, make_project, stop_keepers
from tests.support.pg import PG15_BIN, Server, available_servers
from tests.support.pooler import PGBOUNCER, Bouncer, need


@pytest.fixture
def pg15_db(servers: dict[str, Server]) -> Iterator[str]:
    need("Debian's PostgreSQL 15 (postgresql-15)", "pg15" in available_servers() and (PG15_BIN / "initdb").exists())
    need("Debian's PgBouncer (pgbouncer)", Path(PGBOUNCER).exists())
    with fresh_database(servers, "pg15") as url:
        yield url


@pytest.fixture
def bouncer(pg15_db: str) -> Iterator[Bouncer]:
    socket_dir = str(psycopg.conninfo.conninfo_to_dict(pg15_db)["host"])
    b = Bouncer(socket_dir, users=["postgres", "mergebot_app"])
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
async def pooled_fleet(pg15_db: str, bouncer: Bouncer, tmp_path: Path) -> AsyncIterator[Fleet]:
    dbname = psycopg.conninfo.conninfo_to_dict(pg15_db)["dbname"]
    pooled = bouncer.url(str(dbname))
    settings = Settings(database_url=pg15_db, data_dir=tmp_path / "data")
    db = await Database.connect(pg15_db, settings, statement_timeout_ms=5000)
    tokens = {}
    for name, role in (("lead", Role.LEAD), ("ann", Role.AGENT), ("bob", Role.AGENT), ("rita", Role.REVIEWER)):
        _, tokens[name] = await db.agents.add_agent(name=name, role=role)
    await add_repo(db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command=check_command(), verifier_timeout_s=60))
    bot = BotProcess(pooled, tmp_path / "data", MERGEBOT_DATABASE_DIRECT_URL=pg15_db,
                     MERGEBOT_VERIFIER_SANDBOX="none").start()
    try:
        yield Fleet(bot, db, tokens, tmp_path / "work")
    finally:
        stop_keepers(tmp_path / "work")
        bot.stop()
        await db.close()


def _pooled_pids(bouncer: Bouncer) -> set[int]:
    """The server backends PgBouncer holds (what it hands to its clients, transaction by transaction)."""
    return {int(s["remote_pid"]) for s in bouncer.show("SERVERS") if s.get("remote_pid")}


async def test_landing_claims_and_waits_through_pgbouncer_in_transaction_mode(
        pooled_fleet: Fleet, bouncer: Bouncer, pg15_db: str) -> None:
    f, db = pooled_fleet, pooled_fleet.db
    log = f.bot.log.read_text()
    assert "mergebot_app (login); through a transaction pooler" in log, log[-2000:]

    # the landing path: push, verify, land, and the dependent released
    first, _ = await db.subtasks.create_subtask(actor_id=None, title="add mul")
    second, _ = await db.subtasks.create_subtask(actor_id=None, title="use mul", depends_on=[first.id])
    claim, wt = f.start("ann")
    assert claim.subtask_id == first.id
    commit(wt, {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    deadline = time.monotonic() + 90
    while (await db.subtasks.get_subtask(first.id)).status != "landed":
        assert time.monotonic() < deadline, f.bot.log.read_text()[-3000:] + bouncer.log()[-2000:]
        time.sleep(0.2)
    assert (await db.subtasks.get_subtask(second.id)).status == "ready"
    landed = await db.landing.landed(repo="demo")
    assert [r.subtask_id for r in landed] == [first.id] and landed[0].merged_sha == f.main()

    # the claim race: eight agents at once for five subtasks; each is claimed once
    lead = f.client("lead")
    ids = [lead.post("/api/v1/subtasks", {"title": f"race {i}", "allow_duplicate": True})["subtask"]["id"]
           for i in range(4)] + [second.id]
    racers = []
    for i in range(8):
        _, token = await db.agents.add_agent(name=f"racer{i}", role=Role.AGENT)
        racers.append(Client(f.bot.url, token))
    barrier = threading.Barrier(len(racers))

    def race(c: Client) -> int | None:
        barrier.wait()
        got = c.post("/api/v1/subtasks/claim")
        return None if got is None else int(got["subtask"]["id"])

    with ThreadPoolExecutor(len(racers)) as pool:
        won = list(pool.map(race, racers))
    assert sorted(w for w in won if w is not None) == sorted(ids) and won.count(None) == 3, won

    # a held claim is answered when work appears (LISTEN on the direct URL), not at the end of its wait
    got: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: got.update(
        r=f.client("bob").request("POST", "/api/v1/subtasks/claim", json={"wait": 30})))
    waiter.start()
    time.sleep(1.0)
    new = lead.post("/api/v1/subtasks", {"title": "arrives while bob waits"})["subtask"]["id"]
    waiter.join(25)
    assert not waiter.is_alive() and got["r"] is not None and got["r"]["subtask"]["id"] == new, got

    # what went through the pooler, and what did not
    stats = {s["database"]: s for s in bouncer.show("STATS")}
    dbname = str(psycopg.conninfo.conninfo_to_dict(pg15_db)["dbname"])
    assert int(stats[dbname]["total_xact_count"]) > 50  # the API's and the queue's work went through PgBouncer
    with psycopg.connect(pg15_db, autocommit=True) as conn:
        holders = {int(r[0]) for r in conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())").fetchall()}
        listeners = {int(r[0]) for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%LISTEN mergebot_%'")}
    pooled = _pooled_pids(bouncer)
    assert holders and not holders & pooled, (holders, pooled)  # the queue's leadership: a session of its own
    assert listeners and not listeners & pooled, (listeners, pooled)  # LISTEN too


async def test_the_app_role_keeps_its_grants_and_its_timeout_through_the_pooler(
        pooled_fleet: Fleet, bouncer: Bouncer, pg15_db: str) -> None:
    dbname = str(psycopg.conninfo.conninfo_to_dict(pg15_db)["dbname"])
    with psycopg.connect(bouncer.url(dbname, "mergebot_app"), autocommit=True, prepare_threshold=None) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("mergebot_app",)
        assert conn.execute("SHOW statement_timeout").fetchone() == ("5s",)  # the role's, set by serve
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM events")  # the audit log is append-only for the app role
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE mine (x int)")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(10)")  # bounded, though no startup option could say so


def test_the_direct_url_counts_only_with_a_database_url_that_differs_from_it() -> None:
    from mergebot.db.connect import direct_url

    pooled = Settings(database_url="postgresql://p@127.0.0.1:6432/db", database_direct_url="postgresql://p@/db")
    assert pooled.pooled and direct_url(pooled, pooled.database_url) == "postgresql://p@/db"
    same = Settings(database_url="postgresql://p@/db", database_direct_url="postgresql://p@/db")
    embedded = Settings(database_url="", database_direct_url="postgresql://p@/db")  # no pooler before embedded
    for s in (same, embedded):
        assert not s.pooled and direct_url(s, "postgresql://resolved/db") == "postgresql://resolved/db"
