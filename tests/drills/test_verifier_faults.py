"""Verifier workers killed mid-run, and a worker cut off from the database, while agents push: every verify job
finishes exactly once per fencing token. The job's one result is written by the holder of its newest claim
version; a killed worker's run is taken over by another worker under a new version; the partitioned worker's
late result, under the old version, is refused (and says so in its log); every landing rests on a passing run
of the exact merged commit. (tests/test_jobs.py covers the db-level fencing one job at a time.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from mergebot.auth import Role
from mergebot.landing.main.repos import repos_root
from mergebot.rules import RulesChange
from tests.drills.conftest import Rig, RigFactory, drill_seed

ROOT = Path(__file__).resolve().parents[2]


class Workers:
    def __init__(self, rig: Rig, token: str, tmp: Path) -> None:
        self.rig, self.token, self.tmp = rig, token, tmp
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def http(self, name: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 (the process holds it)
        proc = subprocess.Popen(
            [sys.executable, "-m", "mergebot", "verifier", "worker", "--server", self.rig.bot.url, "--token",
             self.token, "--work-dir", str(self.tmp / name), "--sandbox", "none", "--heartbeat", "0.5"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "MERGEBOT_TOKEN": ""})
        self.procs[proc.pid] = proc
        return proc

    def direct(self, url: str, name: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.drills.dbworker", url, str(repos_root(self.rig.data)), str(self.tmp / name),
             "2"], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.procs[proc.pid] = proc
        return proc

    def kill(self, pid: int) -> None:
        proc = self.procs.pop(pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for pid in list(self.procs):
            self.kill(pid)


@pytest.fixture
def partitionable(e2e_db_url: str) -> Iterator[tuple[str, psycopg.Connection[tuple[object, ...]]]]:
    """A login role of its own for one worker, so the drill can cut that worker alone off the database."""
    role = f"drill_worker_{os.getpid()}_{time.monotonic_ns() % 100000}"
    conn = psycopg.connect(e2e_db_url, autocommit=True)
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER").format(sql.Identifier(role)))
    info = psycopg.conninfo.conninfo_to_dict(e2e_db_url)
    info["user"] = role
    info.pop("password", None)
    try:
        yield psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None}), conn
    finally:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        conn.close()


def wait_for(what: str, pred: object, timeout: float = 30) -> object:
    deadline = time.monotonic() + timeout
    while True:
        got = pred() if callable(pred) else pred
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


async def test_killed_and_partitioned_workers_finish_each_job_once_per_token(
        rig_factory: RigFactory, tmp_path: Path,
        partitionable: tuple[str, psycopg.Connection[tuple[object, ...]]]) -> None:
    worker_url, admin = partitionable
    role = psycopg.conninfo.conninfo_to_dict(worker_url)["user"]
    pace = tmp_path / "check-seconds"  # how long the check sleeps, read when each run starts
    pace.write_text("6")
    rig = await rig_factory(verifier=f"sleep $(cat {pace}) && test -f calc.py", MERGEBOT_VERIFIER_WORKERS="0",
                            MERGEBOT_JOB_LEASE_SECONDS="2", MERGEBOT_RECOVERY_GRACE_SECONDS="0",
                            MERGEBOT_RECOVERY_INTERVAL_SECONDS="0.3")
    # A killed job is to be run to its end by another worker, so the repository's rules keep one candidate per run
    # and one run at a time: in a wider window a run that passed on top of a killed job's candidate would land it
    # and cancel that job, which then proves nothing about its worker's death.
    await rig.db.repos.update_repo("demo", RulesChange.of(speculation_window=1, batch_size=1))
    _, vera = await rig.db.agents.add_agent(name="vera", role=Role.VERIFIER)
    workers = Workers(rig, vera, tmp_path)
    db = rig.db
    drill = rig.drill(drill_seed())
    until = time.monotonic() + 150
    try:
        # 1. A partition: the worker running the only job loses the database; its lease lapses; another worker
        #    takes the job under claim version 2 and finishes it; the partition heals; the first worker's result,
        #    under version 1, is refused.
        first = drill.subtasks(1, "partition", until=until)
        # One push: a second one would replace the candidate and cancel the very job the partition is about.
        result, threads = drill.stream(drill.agents(1, until=until), until=until, double_push=0.0)
        workers.direct(worker_url, "partitioned")

        async def running_on_partitioned() -> object:
            rows = await db.jobs.jobs(status="running")
            return next((r for r in rows if r["worker_name"] == "partitioned-worker"), None)

        deadline = time.monotonic() + 40
        while (job := await running_on_partitioned()) is None:
            assert time.monotonic() < deadline, (tmp_path / "partitioned.log").read_text()[-3000:]
            time.sleep(0.1)
        assert isinstance(job, dict)
        admin.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(role)))
        cut = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = %s",
                            (role,)).fetchone()
        assert cut is not None and cut[0] >= 1
        deadline = time.monotonic() + 20
        while (await db.jobs.get_job(job["id"])).status != "queued":  # lease lapsed, recovery gave it back
            assert time.monotonic() < deadline, [(j["id"], j["status"], j["purpose"]) for j in await db.jobs.jobs()]
            time.sleep(0.1)
        pace.write_text("0.5")
        workers.http("rescuer")
        deadline = time.monotonic() + 30
        while (await db.jobs.get_job(job["id"])).status != "done":
            assert time.monotonic() < deadline, (tmp_path / "rescuer.log").read_text()[-3000:]
            time.sleep(0.1)
        admin.execute(sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(role)))
        done = await db.jobs.get_job(job["id"])
        assert (done.claim_version, done.attempts, done.outcome) == (2, 2, "pass")
        assert done.worker_name != "partitioned-worker" and done.result is not None
        assert done.result["commit_sha"] == done.commit_sha
        log = tmp_path / "partitioned.log"
        deadline = time.monotonic() + 30
        while f"result of job {job['id']} discarded" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        assert (await db.jobs.get_job(job["id"])).worker_name == done.worker_name  # the refused result changed nothing
        for t in threads:
            t.join(max(1.0, until - time.monotonic()))
        await rig.wait_settled(first)
        pushes = list(result.pushes)

        # 2. Workers SIGKILLed mid-run under a push stream: another worker finishes each of their jobs under a
        #    newer claim version.
        for pid, proc in list(workers.procs.items()):
            if proc.args[2] == "tests.drills.dbworker":
                workers.kill(pid)
        pace.write_text("1")
        for i in range(2):
            workers.http(f"w{i}")
        ids = drill.subtasks(4, "worker kills", until=until)
        result, threads = drill.stream(drill.agents(3, until=until), until=until)
        killed: list[tuple[int, int, int]] = []
        n = 2
        while len(killed) < 3:
            assert time.monotonic() < until, "no running job to kill"
            rows = await db.jobs.jobs(status="running")
            fresh = datetime.now(UTC) - timedelta(seconds=0.4)  # a run of 1 s that started just now: mid-run
            victim = next((r for r in rows if r["worker_name"] and r["started_at"] >= fresh
                           and r["id"] not in {k[0] for k in killed}
                           and int(r["worker_name"].split("/")[1]) in workers.procs), None)
            if victim is None:
                time.sleep(0.1)
                continue
            pid = int(victim["worker_name"].split("/")[1])
            workers.kill(pid)
            killed.append((victim["id"], victim["claim_version"], pid))
            workers.http(f"w{n}")
            n += 1
        for t in threads:
            t.join(max(1.0, until - time.monotonic()))
        assert result.errors == []
        await rig.wait_settled([*first, *ids])
        deadline = time.monotonic() + 60
        while any(r["status"] in ("queued", "running") for r in await db.jobs.jobs(limit=1000)):
            assert time.monotonic() < deadline, [(r["id"], r["status"]) for r in await db.jobs.jobs(limit=1000)]
            time.sleep(0.2)
        taken_over = 0
        for job_id, version, pid in killed:
            j = await db.jobs.get_job(job_id)
            cand = await db.landing.get_candidate(j.candidate_id) if j.candidate_id else None
            if j.status == "cancelled" and cand is not None and cand.status == "superseded":
                # the agent pushed again meanwhile (its wait for this push ran out): the newer candidate's runs
                # decide, and this job holds no one's result
                assert j.result is None and j.outcome is None, (j.purpose, j.result, j.outcome)
                continue
            assert j.status == "done" and j.worker_name is not None and j.finished_at is not None, (
                f"{(j.purpose, j.status, j.claim_version, version, j.worker_name, pid)} candidate "
                f"{cand and (cand.id, cand.subtask_id, cand.status, cand.reason)}\n{rig.bot.log.read_text()[-5000:]}")
            if j.claim_version == version:  # its result was on the wire when the worker died: that holder's, once
                assert int(j.worker_name.split("/")[1]) == pid
            else:  # killed mid-run: another worker ran it under a newer claim version
                assert j.claim_version > version and int(j.worker_name.split("/")[1]) != pid
                taken_over += 1
        assert taken_over >= 1, killed  # at least one run was killed mid-run and finished by another worker
        for r in await db.jobs.jobs(limit=1000):
            j = await db.jobs.get_job(r["id"])
            if j.status == "done":  # one result, for the commit asked, by the holder of the newest version
                assert j.attempts == j.claim_version and j.finished_at is not None and j.result is not None
                assert j.result.get("commit_sha") == j.commit_sha, (j.purpose, j.result)
        landed = await db.landing.landed(repo="demo", limit=100)
        assert len(landed) == 5 and {r.verifier_result for r in landed} == {"pass"}
        assert rig.violations([*pushes, *result.pushes]) == []
    finally:
        workers.stop()
