"""Verify jobs and verifier workers: fencing, lost leases, killed workers, and several worker processes at once.

Workers here are real ``mergebot verifier worker`` processes talking to a real ``mergebot serve`` over HTTP (jobs
through the API, commits through git), on real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from mergebot.auth import Role
from mergebot.client import ApiError, Client
from mergebot.db.database import Database
from mergebot.errors import ClaimSuperseded
from mergebot.git import repo as git
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules
from tests.conftest import bot_env
from tests.support.bot import BotProcess, make_project
from tests.test_verifier import processes_with


@dataclass
class Rig:
    bot: BotProcess
    db: Database
    tokens: dict[str, str]
    sha: str
    work: Path

    def worker(self, name: str, *extra: str) -> subprocess.Popen[bytes]:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 (closed by the process's end)
        return subprocess.Popen(
            [sys.executable, "-m", "mergebot", "verifier", "worker", "--server", self.bot.url, "--token",
             self.tokens["vera"], "--work-dir", str(self.work / name), "--sandbox", "none", "--heartbeat", "0.5",
             *extra], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "MERGEBOT_TOKEN": ""})


@pytest.fixture
async def rig(e2e_db: Database, e2e_db_url: str, tmp_path: Path, request: pytest.FixtureRequest
              ) -> AsyncIterator[Rig]:
    """``@pytest.mark.bot_env(...)`` as for the ``fleet`` fixture (tests/conftest.py)."""
    db = e2e_db
    db.jobs.lease_seconds = 2
    tokens = {}
    for name, role in (("vera", Role.VERIFIER), ("ann", Role.AGENT), ("root", Role.ADMIN)):
        _, tokens[name] = await db.agents.add_agent(name=name, role=role)
    data = tmp_path / "data"
    repo = await add_repo(db, repos_root(data), name="demo", source=str(make_project(tmp_path / "src")),
                          rules=Rules.of(verifier_command="true"))
    sha = git.head_of(git.open_repo(git.bare_path(repos_root(data), "demo")), "refs/heads/main")
    assert sha is not None and repo.name == "demo"
    bot = BotProcess(e2e_db_url, data, MERGEBOT_VERIFIER_WORKERS="0", MERGEBOT_JOB_LEASE_SECONDS="2",
                     MERGEBOT_RECOVERY_GRACE_SECONDS="0").start(**bot_env(request))
    work = tmp_path / "work"
    work.mkdir()
    try:
        yield Rig(bot, db, tokens, sha, work)
    finally:
        bot.stop()


async def wait_done(db: Database, ids: list[int], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [await db.jobs.get_job(i) for i in ids]
        if all(j.status == "done" for j in jobs):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"jobs not done: {[(j.id, j.status) for j in jobs]}")


async def test_fenced_result_and_lost_lease(rig: Rig) -> None:
    """A worker that lost its lease cannot report; the new holder's result is the one recorded."""
    db = rig.db
    job = await db.jobs.enqueue_job(repo="demo", commit_sha=rig.sha, command="true", timeout_s=10, purpose="manual")
    first = await db.jobs.claim_job(worker_id=None, worker_name="w1")
    assert first is not None and first.id == job.id and first.claim_version == 1
    await db.jobs.heartbeat_job(job_id=job.id, worker_id=None, claim_version=1)
    db.jobs.lease_seconds = 0.01
    await db.jobs.heartbeat_job(job_id=job.id, worker_id=None, claim_version=1)  # lease now about to lapse
    await asyncio.sleep(0.05)
    assert [r["id"] for r in await db.jobs.recover_jobs(grace_seconds=0)] == [job.id]
    db.jobs.lease_seconds = 30
    second = await db.jobs.claim_job(worker_id=None, worker_name="w2")
    assert second is not None and second.claim_version == 2
    with pytest.raises(ClaimSuperseded) as err:
        await db.jobs.finish_job(job_id=job.id, worker_id=None, claim_version=1, outcome="pass", result={})
    assert err.value.detail["current_version"] == 2
    done = await db.jobs.finish_job(job_id=job.id, worker_id=None, claim_version=2, outcome="fail", result={"x": 1})
    assert (done.status, done.outcome, done.worker_name) == ("done", "fail", "w2")
    with pytest.raises(ClaimSuperseded):  # and it finishes only once
        await db.jobs.finish_job(job_id=job.id, worker_id=None, claim_version=2, outcome="pass", result={})


async def test_runs_that_decide_a_landing_go_first(rig: Rig) -> None:
    """Candidate runs go first, then the runs judging a failed candidate, then post-land and manual checks, so a
    speculative window is never held up."""
    db = rig.db
    jobs = {}
    for purpose in ("post_land", "manual", "retry", "candidate", "post_land", "base", "candidate"):
        job = await db.jobs.enqueue_job(repo="demo", commit_sha=rig.sha, command="true", timeout_s=10,
                                        purpose=purpose)
        jobs[job.id] = purpose
    order = []
    while (got := await db.jobs.claim_job(worker_id=None, worker_name="w")) is not None:
        order.append(jobs[got.id])
    assert order == ["candidate", "candidate", "retry", "base", "post_land", "manual", "post_land"]


async def test_stale_result_over_http_is_409(rig: Rig) -> None:
    job = await rig.db.jobs.enqueue_job(repo="demo", commit_sha=rig.sha, command="true", timeout_s=10,
                                        purpose="manual")
    vera = Client(rig.bot.url, rig.tokens["vera"])
    got = vera.post("/api/v1/verify-jobs/claim", {"worker": "t"})
    assert got["job"]["id"] == job.id
    with pytest.raises(ApiError) as err:
        vera.post(f"/api/v1/verify-jobs/{job.id}/result", {"claim_version": 7, "result": {"outcome": "pass"}})
    assert err.value.status == 409 and err.value.code == "claim_superseded"
    ann = Client(rig.bot.url, rig.tokens["ann"])
    with pytest.raises(ApiError) as err:  # an agent may not act as a verifier
        ann.post("/api/v1/verify-jobs/claim", {"worker": "t"})
    assert err.value.status == 403


async def test_worker_killed_mid_run_job_finished_elsewhere(rig: Rig) -> None:
    job = await rig.db.jobs.enqueue_job(repo="demo", commit_sha=rig.sha, command="sleep 3; echo finished",
                                        timeout_s=30, purpose="manual")
    doomed = rig.worker("doomed")
    deadline = time.monotonic() + 30
    while (running := await rig.db.jobs.get_job(job.id)).status != "running":
        assert time.monotonic() < deadline, (rig.work / "doomed.log").read_text()
        await asyncio.sleep(0.1)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    rescuer = rig.worker("rescuer")
    try:
        await wait_done(rig.db, [job.id], timeout=60)
    finally:
        rescuer.kill()
        rescuer.wait()
    done = await rig.db.jobs.get_job(job.id)
    assert done.outcome == "pass" and done.claim_version == 2 and done.attempts == 2
    assert done.worker_name != running.worker_name  # finished by the other worker
    assert "finished" in (done.result or {}).get("log_head", "")


async def _cancel(db: Database, job_id: int) -> None:
    """What the queue does to a run that can no longer land (``job_cancel_for_candidate``), for one job."""
    async with db.pool.connection() as conn:
        await conn.execute("UPDATE verify_jobs SET status = 'cancelled', finished_at = now(), "
                           "lease_expires_at = NULL WHERE id = %s", (job_id,))


async def _cancelled_run_frees_its_worker(rig: Rig, job_id: int, token: str, marker: Path) -> str:
    deadline = time.monotonic() + 30
    while (running := await rig.db.jobs.get_job(job_id)).status != "running":
        assert time.monotonic() < deadline, rig.bot.log.read_text()[-3000:]
        await asyncio.sleep(0.1)
    while not processes_with(token):  # claimed; a remote worker fetches the commit before the check starts
        assert time.monotonic() < deadline, "the check never started"
        await asyncio.sleep(0.1)
    await _cancel(rig.db, job_id)
    quick = await rig.db.jobs.enqueue_job(repo="demo", commit_sha=rig.sha, command="true", timeout_s=30,
                                          purpose="manual")
    await wait_done(rig.db, [quick.id], timeout=60)  # the 1000 s check no longer holds the only worker
    assert (await rig.db.jobs.get_job(quick.id)).worker_name == running.worker_name
    assert (await rig.db.jobs.get_job(job_id)).status == "cancelled"  # its run's result was not recorded
    deadline = time.monotonic() + 10
    while processes_with(token):
        assert time.monotonic() < deadline, "the cancelled check is still running"
        await asyncio.sleep(0.1)
    assert not marker.exists()
    return str(running.worker_name)


async def test_a_cancelled_run_stops_at_once_in_a_remote_worker(rig: Rig) -> None:
    """Over HTTP the cancellation shows as a refused heartbeat: the check is killed, the worker takes the next."""
    token = f"1000.{time.monotonic_ns() % 10**9:09d}"
    marker = rig.work / "after-the-sleep"
    job = await rig.db.jobs.enqueue_job(repo="demo", commit_sha=rig.sha, command=f"sleep {token}; touch {marker}",
                                        timeout_s=3000, purpose="manual")
    worker = rig.worker("w")
    try:
        await _cancelled_run_frees_its_worker(rig, job.id, token, marker)
    finally:
        worker.kill()
        worker.wait()


@pytest.mark.bot_env(MERGEBOT_VERIFIER_WORKERS="1", MERGEBOT_JOB_LEASE_SECONDS="300", MERGEBOT_VERIFIER_SANDBOX="none")
async def test_a_cancelled_run_stops_at_once_in_the_server_s_worker(rig: Rig) -> None:
    """Inside ``mergebot serve`` the worker hears the job's cancellation on the server's listening connection,
    long before its next heartbeat (a 300 s lease here: one every 100 s)."""
    token = f"1000.{time.monotonic_ns() % 10**9:09d}"
    marker = rig.work / "after-the-sleep"
    job = await rig.db.jobs.enqueue_job(repo="demo", commit_sha=rig.sha, command=f"sleep {token}; touch {marker}",
                                        timeout_s=3000, purpose="manual")
    await _cancelled_run_frees_its_worker(rig, job.id, token, marker)
    assert f"run of job {job.id} stopped" in rig.bot.log.read_text()


@pytest.mark.parametrize("workers", [2, 4])
async def test_many_workers_no_job_twice_none_lost(rig: Rig, workers: int) -> None:
    runs = rig.work / "runs.log"
    for _ in range(2):  # repeat the drill
        ids = []
        for _ in range(16):
            marker = f"job-{len(ids)}-{time.monotonic_ns()}"
            job = await rig.db.jobs.enqueue_job(repo="demo", commit_sha=rig.sha, timeout_s=30, purpose="manual",
                                                command=f"sleep 0.2; echo {marker} >> {runs}")
            ids.append(job.id)
        procs = [rig.worker(f"w{i}") for i in range(workers)]
        try:
            await wait_done(rig.db, ids)
        finally:
            for p in procs:
                p.kill()
                p.wait()
        jobs = [await rig.db.jobs.get_job(i) for i in ids]
        assert all(j.outcome == "pass" and j.claim_version == 1 for j in jobs)
        counts = collections.Counter(runs.read_text().split())
        assert counts and max(counts.values()) == 1  # no check ran twice to completion
        assert len({j.worker_name for j in jobs}) > 1  # the work was shared
        runs.unlink()


async def test_waits_share_the_process_listener(db: Database, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting on verify jobs opens no connection of its own (the database's one listener serves every wait) and
    still wakes at once when a job finishes or is cancelled."""
    await add_repo(db, repos_root(tmp_path / "data"), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command="true"))
    sha = git.head_of(git.open_repo(git.bare_path(repos_root(tmp_path / "data"), "demo")), "refs/heads/main")
    assert sha is not None
    await db.waiter.start()

    def no_new_connections(*args: object, **kwargs: object) -> None:
        raise AssertionError("a wait opened its own connection")

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", no_new_connections)
    try:
        one = await db.jobs.enqueue_job(repo="demo", commit_sha=sha, command="true", timeout_s=10, purpose="manual")
        two = await db.jobs.enqueue_job(repo="demo", commit_sha=sha, command="true", timeout_s=10, purpose="manual")
        waiting = asyncio.create_task(db.jobs.wait_job(one.id, timeout=30))
        both = asyncio.create_task(db.jobs.wait_any([one.id, two.id], timeout=30))
        await asyncio.sleep(0.2)
        assert not waiting.done() and not both.done()
        job = await db.jobs.claim_job(worker_id=None, worker_name="w")
        assert job is not None and job.id == one.id
        await db.jobs.finish_job(job_id=job.id, worker_id=None, claim_version=job.claim_version, outcome="pass",
                                 result={"outcome": "pass"})
        done = await asyncio.wait_for(waiting, 5)
        await asyncio.wait_for(both, 5)
        assert (done.id, done.status, done.outcome) == (one.id, "done", "pass")
        assert (await db.jobs.wait_job(two.id, timeout=0.1)).status == "queued"  # timeout returns the last seen
    finally:
        await db.waiter.stop()
