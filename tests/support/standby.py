"""Debian's PostgreSQL 15 as a primary with a synchronous streaming standby, for the failover drills.

Both run as the unprivileged ``postgres`` user on unix sockets in directories of their own (same port number,
different directories), so one libpq multi-host URL names both: ``host=PRIMARY,STANDBY`` with
``target_session_attrs=read-write`` connects to whichever accepts writes. The primary waits for the standby on
every commit (``synchronous_standby_names = '*'``, written before the base backup, so the standby carries it too:
the trap a hand-run failover must clear, ``promote`` does).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from mergebot.db.migrate import migrate
from tests.support.pg import PG15_BIN


def _as_postgres(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, user="postgres", cwd=str(cwd), check=True, capture_output=True, text=True)


class Pair:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="mb-pg15-pair-"))
        pw = pwd.getpwnam("postgres")
        os.chmod(self.tmp, 0o755)
        os.chown(self.tmp, pw.pw_uid, pw.pw_gid)
        self.sockets = {"primary": self.tmp / "primary-run", "standby": self.tmp / "standby-run"}
        for d in self.sockets.values():
            d.mkdir()
            os.chown(d, pw.pw_uid, pw.pw_gid)
        self.data = {"primary": self.tmp / "primary", "standby": self.tmp / "standby"}
        _as_postgres([str(PG15_BIN / "initdb"), "-D", str(self.data["primary"]), "-U", "postgres", "--auth=trust",
                      "--encoding=UTF8", "--no-sync"], self.tmp)
        with open(self.data["primary"] / "postgresql.conf", "a") as conf:
            conf.write("listen_addresses = ''\nmax_connections = 200\nwal_level = replica\nmax_wal_senders = 5\n"
                       "synchronous_standby_names = '*'\nsynchronous_commit = on\nfsync = off\n")
        self.start("primary")
        _as_postgres([str(PG15_BIN / "pg_basebackup"), "-D", str(self.data["standby"]), "-R", "-X", "stream",
                      "-h", str(self.sockets["primary"]), "-U", "postgres"], self.tmp)
        self.start("standby")
        self.wait_sync()

    def start(self, which: str) -> None:
        opts = f"-c unix_socket_directories={self.sockets[which]}"
        _as_postgres([str(PG15_BIN / "pg_ctl"), "-D", str(self.data[which]), "-o", opts, "-l",
                      str(self.tmp / f"{which}.log"), "-w", "start"], self.tmp)

    def url(self, which: str, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.sockets[which]}"

    def multi_url(self, dbname: str) -> str:
        """Both servers, the writable one chosen at each connection."""
        return (f"postgresql://postgres@/{dbname}?host={self.sockets['primary']},{self.sockets['standby']}"
                "&target_session_attrs=read-write")

    def query(self, which: str, query: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url(which, dbname), autocommit=True) as conn:
            cur = conn.execute(query)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def wait_sync(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self.query("primary", "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'"):
            if time.monotonic() > deadline:
                raise RuntimeError("the standby never became synchronous:\n"
                                   + (self.tmp / "standby.log").read_text()[-2000:])
            time.sleep(0.05)

    def create_db(self, name: str) -> str:
        """A migrated database on the primary (streamed to the standby); its multi-host URL."""
        with psycopg.connect(self.url("primary"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        migrate(self.url("primary", name))
        return self.multi_url(name)

    def kill_primary(self) -> None:
        self.kill("primary")

    def kill(self, which: str) -> None:
        """SIGKILL the server's postmaster (its backends go with it)."""
        pid = int((self.data[which] / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (self.sockets[which] / ".s.PGSQL.5432").exists() and time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)

    def promote(self) -> None:
        """Promote the standby, then clear the synchronous_standby_names it inherited: with no standby of its own,
        every commit would wait forever (Patroni clears it; a hand-run failover must)."""
        _as_postgres([str(PG15_BIN / "pg_ctl"), "-D", str(self.data["standby"]), "-w", "promote"], self.tmp)
        self.query("standby", "ALTER SYSTEM SET synchronous_standby_names = ''")
        self.query("standby", "SELECT pg_reload_conf()")

    def stop(self) -> None:
        for which in ("standby", "primary"):
            subprocess.run([str(PG15_BIN / "pg_ctl"), "-D", str(self.data[which]), "-m", "immediate", "stop"],
                           user="postgres", capture_output=True, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
