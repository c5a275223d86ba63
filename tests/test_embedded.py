"""The embedded PostgreSQL comes back after crashes: a zombie postmaster (PID 1 reaping late) or a postmaster.pid
naming a dead or foreign process is not taken for a live server, and a clean stop after crashes still stops
the server (users that died are pruned from the wheel's list). Real processes, a real postmaster, no mocks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mergebot.db.embedded import HANDLES, alive, prune_users, stale_postmaster
from tests.support.bot import BotProcess


def _pidfile(pgdata: Path, pid: int) -> None:
    pgdata.mkdir(parents=True, exist_ok=True)
    (pgdata / "postmaster.pid").write_text(f"{pid}\n{pgdata}\n1700000000\n5432\n{pgdata}\n\n 1 2\nready\n")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_postmaster_pid_naming_a_dead_or_foreign_process_is_stale(tmp_path: Path) -> None:
    pgdata = tmp_path / "pg"
    assert stale_postmaster(pgdata) is None  # nothing there: nothing to join, nothing removed
    _pidfile(pgdata, _dead_pid())
    assert "dead or a zombie" in (stale_postmaster(pgdata) or "")
    assert not (pgdata / "postmaster.pid").exists()
    _pidfile(pgdata, os.getpid())  # a reused pid: alive, but a python, not a postgres
    assert "not a postgres" in (stale_postmaster(pgdata) or "")
    assert not (pgdata / "postmaster.pid").exists()


def test_users_no_longer_alive_are_pruned(tmp_path: Path) -> None:
    dead = _dead_pid()
    (tmp_path / HANDLES).write_text(json.dumps([os.getpid(), dead]))
    assert prune_users(tmp_path) == [dead]
    assert json.loads((tmp_path / HANDLES).read_text()) == [os.getpid()]
    assert prune_users(tmp_path) == []
    assert alive(os.getpid()) and not alive(dead)


@pytest.mark.skipif(sys.platform != "linux", reason="a child subreaper is Linux's")
def test_serve_comes_up_over_a_zombie_postmaster_and_a_clean_stop_stops_the_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    holder = subprocess.Popen([sys.executable, str(Path(__file__).parent / "support" / "zombie_holder.py"), str(data)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        zombie = json.loads(holder.stdout.readline())["zombie"]
        assert psutil.Process(zombie).status() == psutil.STATUS_ZOMBIE
        pgdata = data / "pg"
        assert int((pgdata / "postmaster.pid").read_text().split()[0]) == zombie
        left = json.loads((pgdata / HANDLES).read_text())
        assert left and not any(alive(p) for p in left)  # the killed user is still on the list

        bot = BotProcess("", data).start()  # healthy means the database answered: on the first start
        try:
            log = bot.log.read_text()
            assert f"its postmaster {zombie} is dead or a zombie" in log, log[-3000:]
            postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
            assert postmaster != zombie and alive(postmaster)
            assert json.loads((pgdata / HANDLES).read_text()) == [bot.proc.pid if bot.proc else -1]
        finally:
            assert bot.proc is not None
            bot.proc.send_signal(signal.SIGTERM)
            assert bot.proc.wait(60) == 0
        deadline = time.monotonic() + 10  # the last user's clean stop stops the server it started
        while alive(postmaster) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(postmaster), bot.log.read_text()[-3000:]
        assert not (pgdata / "postmaster.pid").exists()
    finally:
        holder.communicate(timeout=30)
