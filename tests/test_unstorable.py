"""A candidate's run never stalls its repository's queue (issue 41): text PostgreSQL cannot store, a worker that loses
its job's lease again and again, and a flood of forged outcome lines, each through a real push run by the real
verifier; after each, a good change to the same repository lands.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from mergebot import agent
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules
from tests.support.bot import BotProcess, Fleet, check_command, commit, make_project, stop_keepers
from tests.test_judged import push
from verifier import sandbox as sb

pytestmark = pytest.mark.skipif(not sb.bwrap_usable(), reason="the verifier's sandbox needs a usable bubblewrap")

GOOD = {"calc.py": "def add(a, b):\n    return a + b\n\n\ndef double(a):\n    return 2 * a\n"}
# Broken, and everything it says is unstorable text: NUL and invalid UTF-8 on stdout and stderr, a NUL in the
# assertion that fails, and forged outcome lines whose ids hold a NUL and a lone surrogate, on every descriptor.
NUL = r'''import json, os, sys

sys.stdout.buffer.write(b"out \x00 nul \xff\xfe bad utf-8\n")
sys.stderr.buffer.write(b"err \x00\xc3\x28\n")
_forged = "".join(json.dumps({"t": "r", "id": "tests/test_calc.py::t\u0000\ud800" + w, "when": w, "o": "failed"}) + "\n"
                  for w in ("setup", "call", "teardown"))
for fd in range(3, 64):
    try:
        os.write(fd, _forged.encode("utf-8", "surrogatepass") + b"\x00\xff\n")
    except OSError:
        pass


def add(a, b):
    raise AssertionError("no \x00 sum \udcff today")
'''
FLOOD = r'''import json, os

_line = "".join(json.dumps({"t": "r", "id": "tests/test_forged.py::test_%07d" % i + "x" * 40, "when": w,
                            "o": "passed"}) + "\n" for i in range(110_000) for w in ("setup", "call", "teardown"))
_data = _line.encode()
for fd in range(3, 64):
    try:
        os.fstat(fd)
    except OSError:
        continue
    try:
        view = memoryview(_data)
        while view:
            view = view[os.write(fd, view[:1 << 20]):]
    except OSError:
        pass


def add(a, b):
    return a - b
'''


async def test_unstorable_text_everywhere_is_stored_and_the_next_change_lands(make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    out = await push(fleet, "nul", "unstorable", {"calc.py": NUL})
    v = out["verdict"]
    assert (out["status"], v["kind"]) == ("rejected", "check_failed"), v
    assert "\x00" not in str(v) and "\ufffd" in v["log_tail"], v["log_tail"][-500:]
    assert "tests/test_calc.py::test_add" in v["failing_tests"], v
    out = await push(fleet, "good", "a good change", GOOD)
    assert out["status"] == "landed", out


async def test_a_flood_of_outcome_lines_is_refused_and_stores_nothing(make_fleet: Callable[..., Any],
                                                                      e2e_db_url: str) -> None:
    """36 MiB of forged outcome lines (110,000 made-up tests) on every descriptor: ``report_flood``, nothing of them
    kept, and the database (its WAL included) grows by a bounded amount."""
    fleet: Fleet = await make_fleet(check_command(), MERGEBOT_RETRY_FAILED_CHECKS="0")
    out = await push(fleet, "warm", "a good change first", GOOD)  # main's baseline exists, the queue is warm
    assert out["status"] == "landed", out

    def size() -> tuple[int, int]:
        with psycopg.connect(e2e_db_url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_database_size(current_database()), "
                               "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

    before = size()
    out = await push(fleet, "flood", "forged outcomes", {"calc.py": FLOOD})
    after = size()
    v = out["verdict"]
    assert (out["status"], v["kind"]) == ("rejected", "report_flood"), v
    assert v["tests"]["flood"] == "more than 100000 tests" and not v["tests"].get("packed"), v["tests"]
    grown, wal = after[0] - before[0], after[1] - before[1]
    print(f"flood: database grew {grown >> 10} KiB, WAL {wal >> 10} KiB")
    assert grown + wal < 64 << 20, (grown, wal)  # before the bounds: 375 MiB for 63 MiB of forged lines
    jobs = fleet.client("root").get("/api/v1/verify-jobs", candidate=out["id"])["jobs"]
    assert jobs and all(len(str(j["result"])) < 200_000 for j in jobs), [len(str(j["result"])) for j in jobs]
    out = await push(fleet, "good", "a good change after", {"calc.py": GOOD["calc.py"] + "\n\nX = 1\n"})
    assert out["status"] == "landed", out


async def test_a_job_that_loses_its_lease_again_and_again_ends_and_the_queue_goes_on(
        e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> None:
    """A remote verifier worker that freezes mid-run (SIGSTOP) until recovery takes the job back, every time: after
    three lost leases the job ends in an error, the retry goes the same way, the candidate gets ``verifier_error``,
    and the next push to the repository lands."""
    tokens = {}
    for name, role in (("vera", Role.VERIFIER), ("ann", Role.AGENT), ("bob", Role.AGENT)):
        _, tokens[name] = await e2e_db.agents.add_agent(name=name, role=role)
    data = tmp_path / "data"
    await add_repo(e2e_db, repos_root(data), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command=check_command(), verifier_timeout_s=60))
    for who in ("ann", "bob"):
        await e2e_db.subtasks.create_subtask(actor_id=None, title=f"{who}'s change")
    # 1.5 s job leases (three of the worker's 0.5 s heartbeats each): six lost leases take ~12 s, not ~21 s at 3 s
    bot = BotProcess(e2e_db_url, data, MERGEBOT_VERIFIER_WORKERS="0", MERGEBOT_JOB_LEASE_SECONDS="1.5",
                     MERGEBOT_RECOVERY_GRACE_SECONDS="0", MERGEBOT_RETRY_FAILED_CHECKS="0").start()
    work = tmp_path / "work"
    work.mkdir()
    log = open(work / "worker.log", "ab")  # noqa: SIM115 (closed below)
    worker = subprocess.Popen([sys.executable, "-m", "mergebot", "verifier", "worker", "--server", bot.url, "--token",
                               tokens["vera"], "--work-dir", str(work / "vera"), "--heartbeat", "0.5"],
                              stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "MERGEBOT_TOKEN": ""})
    fleet = Fleet(bot, e2e_db, tokens, work)
    try:
        _, wt = fleet.start("ann")
        commit(wt, GOOD)
        got: dict[str, Any] = {}
        pusher = threading.Thread(target=lambda: got.update(agent.push(fleet.client("ann"), wt, wait=240,
                                                                       progress=False)))
        pusher.start()
        frozen = 0
        deadline = time.monotonic() + 200
        while pusher.is_alive() and time.monotonic() < deadline:
            running = [j for j in await e2e_db.jobs.jobs(status="running") if j["purpose"] in ("candidate", "retry")]
            if not running:
                await asyncio.sleep(0.1)
                continue
            job = running[0]
            worker.send_signal(signal.SIGSTOP)  # the worker's machine freezes: no heartbeat, no result
            frozen += 1
            while (await e2e_db.jobs.get_job(job["id"])).claim_version == job["claim_version"] and \
                    (await e2e_db.jobs.get_job(job["id"])).status == "running" and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            worker.send_signal(signal.SIGCONT)
        pusher.join(30)
        v = got["verdict"]
        assert (got["status"], v["kind"]) == ("rejected", "verifier_error"), got
        # three lost leases of the first run, three of its retry (a lease a busy machine lost by itself counts too)
        lost = {j["id"]: j["leases_lost"] for j in await e2e_db.jobs.jobs(limit=50)
                if j["purpose"] in ("candidate", "retry")}
        assert sorted(lost.values()) == [3, 3] and 1 <= frozen <= 6, (lost, frozen)
        assert "lost its lease" in v["message"] or "lost its lease" in str(v.get("log_tail")), v

        _, wt = fleet.start("bob")
        commit(wt, {"notes.txt": "bob was here\n"})
        out = agent.push(fleet.client("bob"), wt, wait=120, progress=False)
        assert out["status"] == "landed", out
    finally:
        worker.send_signal(signal.SIGCONT)
        worker.terminate()
        worker.wait(15)
        log.close()
        stop_keepers(work)
        bot.stop()
