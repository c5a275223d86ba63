"""Faults on a real workload, as an operator would cause them: agents land a tree of dependent subtasks through
``mergebot serve`` on its embedded PostgreSQL (the default, no MERGEBOT_DATABASE_URL), with a real test suite as
the check, while the drill SIGKILLs the server at random moments, and on some rounds its PostgreSQL with it, and
starts it again. Agents retry like real ones (a refused connection is waited out, a push is made again).

It ends with: every restart up on its first start (``BotProcess.start`` fails otherwise), every subtask landed
exactly once, main explained entirely by landed rows, the reconciler quiet, no verify run spent on a job whose
candidate had already moved on to a newer job, every step in the events table one the landing protocol's model
takes (``mergebot.protocol.replay``), and a clean stop that stops the embedded PostgreSQL.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg
import pytest

from mergebot.client import Client
from mergebot.db.database import Database
from mergebot.db.embedded import alive
from mergebot.drill.gather import stable_check
from mergebot.drill.scenarios import Drill
from mergebot.protocol.replay import replay
from mergebot.settings import Settings
from tests.drills.conftest import drill_seed
from tests.support.bot import BotProcess, check_command, make_project

# A verify job that finished (ran to a result) after a newer job for the same candidate and purpose was made:
# a run for nobody.
SPENT_FOR_NOBODY = """
SELECT j.id, j.candidate_id, j.purpose FROM verify_jobs j
WHERE j.status = 'done' AND j.candidate_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM verify_jobs n WHERE n.candidate_id = j.candidate_id AND n.purpose = j.purpose AND n.id > j.id
      AND n.created_at < j.finished_at)
"""


def mergebot(args: list[str], data: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "mergebot", *args, "--data-dir", str(data)], capture_output=True,
                         text=True, check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(data.parent)})
    assert out.returncode == 0, (args, out.returncode, out.stdout[-2000:], out.stderr[-4000:])
    return out.stdout


def postmaster(data: Path) -> int | None:
    try:
        return int((data / "pg" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@pytest.mark.parametrize(("subtasks", "replicas", "min_kills"), [
    (8, 1, 3),
    pytest.param(40, 1, 12, marks=pytest.mark.long_drill),
    pytest.param(30, 2, 6, marks=pytest.mark.long_drill),  # two replicas on one data directory, either killed
])
async def test_sigkill_server_and_postgres_under_a_tree_of_dependent_subtasks(tmp_path: Path, subtasks: int,
                                                                             replicas: int, min_kills: int) -> None:
    seed = drill_seed()
    rng = random.Random(seed)
    data = tmp_path / "data"
    admin = json.loads(mergebot(["init", "--json"], data))["token"]
    src = make_project(tmp_path / "src")
    mergebot(["repo", "add", "demo", "--from", str(src), "--verifier", check_command()], data)
    bots = [BotProcess("", data, log_name=f"serve-{i}.log", MERGEBOT_VERIFIER_SANDBOX="none",
                       MERGEBOT_SPECULATION_WINDOW="2", MERGEBOT_JOB_LEASE_SECONDS="3",
                       MERGEBOT_RECOVERY_GRACE_SECONDS="1").start() for i in range(replicas)]
    bot = bots[0]  # the agents' server; with replicas, the drill kills either one
    try:
        drill = Drill(bot.url, admin, "demo", tmp_path / "agents", log=print, seed=seed)
        until = time.monotonic() + 150 + subtasks * 6
        agents = drill.agents(4, until=until)
        # Waves: when the agents finish a tree before the drill has killed often enough (the random pauses ran
        # long), another tree follows, so every run kills at least ``min_kills`` times under work.
        ids, results, kills, pg_kills, wave = [], [], 0, 0, 0
        while kills < min_kills or not pg_kills:
            assert time.monotonic() < until, f"only {kills} kills ({pg_kills} with PostgreSQL) in the time"
            ids += drill.subtasks(subtasks, f"faults {wave}", until=until, tree=3)
            result, threads = drill.stream(agents, until=until, double_push=0.2, patient=True)
            results.append(result)
            wave += 1
            while any(t.is_alive() for t in threads):  # until the agents are done, however long the faults make it
                time.sleep(rng.uniform(0.3, 2.5))  # a tree of 8 lands in about 4 s on a window of two
                if not any(t.is_alive() for t in threads):
                    break
                pg = postmaster(data) if rng.random() < 1 / 3 or (kills >= 1 and not pg_kills) else None
                victim = rng.choice(bots)
                assert victim.proc is not None
                victim.proc.send_signal(signal.SIGKILL)
                if pg is not None:  # the database dies with it: every connection and lock goes at once
                    psutil.Process(pg).send_signal(signal.SIGKILL)
                    pg_kills += 1
                assert victim.proc.wait(30) == -signal.SIGKILL
                kills += 1
                victim.start()  # up on its first start, or this raises with the server's log
            for t in threads:
                t.join(max(1.0, until - time.monotonic()))
        print(f"kills: {kills}, of them with PostgreSQL: {pg_kills}, in {wave} wave(s)")
        pushes = [p for r in results for p in r.pushes]
        assert [e for r in results for e in r.errors] == []

        client = Client(bot.url, admin, timeout=30)
        deadline = time.monotonic() + 90
        while True:
            subs = {s["id"]: s["status"] for s in client.get("/api/v1/subtasks", limit=1000)["subtasks"]}
            busy = [c for c in client.get("/api/v1/candidates", limit=1000)["candidates"]
                    if c["status"] in ("queued", "verifying", "landing")]
            if all(subs.get(i) == "landed" for i in ids) and not busy:
                break
            assert time.monotonic() < deadline, (subs, busy, bot.log.read_text()[-4000:])
            time.sleep(0.5)
        landed = client.get("/api/v1/landed", repo="demo", limit=1000)["landed"]
        assert sorted(r["subtask_id"] for r in landed) == sorted(ids)  # each landed, once
        violations = stable_check(client, bot.url, admin, "demo", tmp_path / "check", pushes, settled=True,
                                  attempts=3)
        assert violations == [], violations
        assert client.get("/api/v1/findings", repo="demo")["findings"] == []
        with psycopg.connect(f"host={data.resolve() / 'pg'} dbname=postgres user=postgres") as conn:
            spent = conn.execute(SPENT_FOR_NOBODY).fetchall()
        assert spent == [], f"verify runs for candidates that had moved on to newer jobs: {spent}"
        url = f"host={data.resolve() / 'pg'} dbname=postgres user=postgres"
        db = await Database.connect(url, Settings(database_url=url, data_dir=data), max_size=2)
        try:  # every step the run recorded is one the landing protocol's model takes
            verdict = await replay(db)
        finally:
            await db.close()
        print(f"trace: {verdict}")
        assert verdict.accepted and verdict.landed == len(ids), verdict
    finally:
        pg = postmaster(data)
        for b in reversed(bots):
            b.stop()
    for b in bots:
        assert b.proc is not None and b.proc.returncode == 0, b.log.read_text()[-3000:]
    deadline = time.monotonic() + 15  # the last user's clean stop stops the embedded PostgreSQL, crashes or not
    while pg is not None and alive(pg) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pg is None or not alive(pg), f"postgres {pg} still running after a clean stop"
